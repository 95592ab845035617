package bench

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// fakeRuns are a test's harvest runs and floors, played in turn; calls
// records the order they were asked for.
type fakeRuns struct {
	runs   []Result
	floors []Floor
	calls  []string
}

func (f *fakeRuns) harvest(context.Context) (Result, error) {
	f.calls = append(f.calls, "harvest")
	if len(f.runs) == 0 {
		return Result{}, errors.New("no more runs")
	}
	r := f.runs[0]
	f.runs = f.runs[1:]
	return r, nil
}

func (f *fakeRuns) floor(context.Context) (Floor, error) {
	f.calls = append(f.calls, "floor")
	if len(f.floors) == 0 {
		return Floor{}, errors.New("no more floors")
	}
	r := f.floors[0]
	f.floors = f.floors[1:]
	return r, nil
}

func floorOf(tasks int, makespanS, cpuUS float64) Floor {
	return Floor{Procs: 4, Tasks: tasks, MakespanS: makespanS, TasksPerS: float64(tasks) / makespanS, CPUUS: cpuUS}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestRoundsTakeEachRunAgainstTheFloorsAroundIt(t *testing.T) {
	f := &fakeRuns{
		// The machine slows down and recovers: floors of 1,000 tasks.
		floors: []Floor{floorOf(1000, 1, 400), floorOf(1000, 3, 600), floorOf(1000, 1, 500), floorOf(1000, 1, 300)},
		runs: []Result{
			{TasksPerS: 400, ProcessCPUUS: 50, WorkersCPUUS: 550, MakespanS: 1}, // 600 us
			{TasksPerS: 800, ProcessCPUUS: 40, WorkersCPUUS: 510, MakespanS: 2}, // 550 us
			{TasksPerS: 900, ProcessCPUUS: 40, WorkersCPUUS: 480, MakespanS: 3}, // 520 us
		},
	}
	r, err := runRounds(context.Background(), 3, f.harvest, f.floor)
	if err != nil {
		t.Fatal(err)
	}
	if want := "floor harvest floor harvest floor harvest floor"; strings.Join(f.calls, " ") != want {
		t.Fatalf("ran %v, want %s", f.calls, want)
	}
	// Round 1 is between floors 1 and 2: 2,000 tasks in 4 s (500/s),
	// 500 us each; round 2 between 2 and 3: 2,000 in 4 s, 550 us; round 3
	// between 3 and 4: 2,000 in 2 s, 400 us.
	want := []Round{
		{TasksPerS: 400, CPUUS: 600, FloorTasksPerS: 500, FloorCPUUS: 500, RateRatio: 0.8, CPURatio: 1.2},
		{TasksPerS: 800, CPUUS: 550, FloorTasksPerS: 500, FloorCPUUS: 550, RateRatio: 1.6, CPURatio: 1},
		{TasksPerS: 900, CPUUS: 520, FloorTasksPerS: 1000, FloorCPUUS: 400, RateRatio: 0.9, CPURatio: 1.3},
	}
	if len(r.Rounds) != len(want) {
		t.Fatalf("%d rounds, want %d", len(r.Rounds), len(want))
	}
	for i, w := range want {
		g := r.Rounds[i]
		if !near(g.TasksPerS, w.TasksPerS) || !near(g.CPUUS, w.CPUUS) || !near(g.FloorTasksPerS, w.FloorTasksPerS) ||
			!near(g.FloorCPUUS, w.FloorCPUUS) || !near(g.RateRatio, w.RateRatio) || !near(g.CPURatio, w.CPURatio) {
			t.Fatalf("round %d: %+v, want %+v", i+1, g, w)
		}
	}
	// The medians and spreads of the rounds; the detail is the median
	// CPU ratio's run (round 1, 1.2x).
	if !near(r.CPURatio, 1.2) || !near(r.RateRatio, 0.9) || r.MedianRound != 1 || !near(r.MakespanS, 1) {
		t.Fatalf("cpu %v rate %v median round %d (makespan %v): want 1.2, 0.9, round 1", r.CPURatio, r.RateRatio, r.MedianRound, r.MakespanS)
	}
	if !reflect.DeepEqual(r.CPURatioSpread, Spread{1, 1.3}) || !reflect.DeepEqual(r.RateRatioSpread, Spread{0.8, 1.6}) {
		t.Fatalf("spreads cpu %+v rate %+v", r.CPURatioSpread, r.RateRatioSpread)
	}
	// Every floor is reported, and pooled: 4,000 tasks in 6 s, 450 us.
	if len(r.Floors) != 4 || r.Floors[1].MakespanS != 3 {
		t.Fatalf("floors %+v", r.Floors)
	}
	if p := r.Floor; p == nil || p.Tasks != 4000 || !near(p.TasksPerS, 4000.0/6) || !near(p.CPUUS, 450) {
		t.Fatalf("pooled floor %+v", r.Floor)
	}
}

func TestOneRoundIsBetweenTwoFloors(t *testing.T) {
	f := &fakeRuns{floors: []Floor{floorOf(500, 1, 300), floorOf(1500, 2, 500)},
		runs: []Result{{TasksPerS: 600, ProcessCPUUS: 45, WorkersCPUUS: 405}}}
	r, err := runRounds(context.Background(), 1, f.harvest, f.floor)
	if err != nil {
		t.Fatal(err)
	}
	// The floors weigh by their tasks: 2,000 in 3 s, (150,000 + 750,000) us / 2,000.
	if !near(r.Rounds[0].FloorTasksPerS, 2000.0/3) || !near(r.Rounds[0].FloorCPUUS, 450) || !near(r.CPURatio, 1) || !near(r.RateRatio, 0.9) {
		t.Fatalf("%+v", r.Rounds[0])
	}
	if r.CPURatioSpread != (Spread{1, 1}) || r.MedianRound != 1 {
		t.Fatalf("spread %+v, median round %d", r.CPURatioSpread, r.MedianRound)
	}
}

func TestAnEvenNumberOfRoundsTakesTheMiddleTwo(t *testing.T) {
	f := &fakeRuns{floors: []Floor{floorOf(100, 1, 100), floorOf(100, 1, 100), floorOf(100, 1, 100), floorOf(100, 1, 100), floorOf(100, 1, 100)},
		runs: []Result{{TasksPerS: 100, WorkersCPUUS: 140}, {TasksPerS: 50, WorkersCPUUS: 110}, {TasksPerS: 80, WorkersCPUUS: 120}, {TasksPerS: 70, WorkersCPUUS: 200}}}
	r, err := runRounds(context.Background(), 4, f.harvest, f.floor)
	if err != nil {
		t.Fatal(err)
	}
	// CPU 1.1, 1.2, 1.4, 2.0: median 1.3, detail the lower middle (round 3).
	if !near(r.CPURatio, 1.3) || !near(r.RateRatio, 0.75) || r.MedianRound != 3 {
		t.Fatalf("cpu %v rate %v round %d, want 1.3, 0.75, 3", r.CPURatio, r.RateRatio, r.MedianRound)
	}
}

func TestRoundsStopAtTheFirstError(t *testing.T) {
	f := &fakeRuns{floors: []Floor{floorOf(100, 1, 100)}, runs: []Result{{TasksPerS: 1}, {TasksPerS: 1}}}
	_, err := runRounds(context.Background(), 2, f.harvest, f.floor)
	if err == nil || !strings.Contains(err.Error(), "round 1: no more floors") {
		t.Fatalf("err %v, want round 1's floor's", err)
	}
	if strings.Join(f.calls, " ") != "floor harvest floor" {
		t.Fatalf("ran %v after the error", f.calls)
	}
	if _, err := runRounds(context.Background(), 0, f.harvest, f.floor); err == nil {
		t.Fatal("0 rounds accepted")
	}
}

func TestRoundsAreForExecOnly(t *testing.T) {
	c := DefaultConfig()
	c.Binary, c.Dir, c.Rounds = "harvest", "/tmp", 3
	if c.Validate() == nil {
		t.Fatal("3 rounds without exec accepted")
	}
	c.Exec = true
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Rounds = -1
	if c.Validate() == nil {
		t.Fatal("-1 rounds accepted")
	}
}
