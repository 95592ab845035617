package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// An --exec run is compared with the machine's fork/exec floor in the
// same invocation. One floor run after the dispatch (as it was) let the
// machine's load drift between the two: the same binary gave 1.01x and
// 1.69x CPU minutes apart. So the floor runs before and after each
// harvest run, in rounds (floor, harvest, floor, harvest, ..., floor:
// Rounds harvest runs, Rounds+1 floors, each floor shared by the rounds
// either side of it), and each round's ratios are taken against the two
// floors around it; the summary is the median round, with the range of
// all rounds and every floor's figures beside it, so a reader sees the
// noise. What is counted is unchanged: harvest's CPU per task is every
// harvest process's (the queue and master, the workers from their start
// to their exit with their runners and tasks), the floor's the loops'
// and their programs'.

// Round is one harvest run of an --exec measurement against the floors
// just before and after it.
type Round struct {
	TasksPerS float64 `json:"tasks_per_s"`
	CPUUS     float64 `json:"cpu_us_per_task"` // queue + master + workers (their runners and tasks)
	// The floors around the run pooled: their tasks over their makespans,
	// their CPU over their tasks.
	FloorTasksPerS float64 `json:"floor_tasks_per_s"`
	FloorCPUUS     float64 `json:"floor_cpu_us_per_task"`
	RateRatio      float64 `json:"rate_vs_floor"`
	CPURatio       float64 `json:"cpu_vs_floor"`
}

// Spread is the lowest and highest of a figure over the rounds.
type Spread struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// between is the round of harvest's run r against the floors a (before)
// and b (after), pooled.
func between(r Result, a, b Floor) Round {
	floorRate := float64(a.Tasks+b.Tasks) / (a.MakespanS + b.MakespanS)
	floorCPU := (a.CPUUS*float64(a.Tasks) + b.CPUUS*float64(b.Tasks)) / float64(a.Tasks+b.Tasks)
	cpu := r.ProcessCPUUS + r.WorkersCPUUS
	return Round{TasksPerS: r.TasksPerS, CPUUS: cpu, FloorTasksPerS: floorRate, FloorCPUUS: floorCPU,
		RateRatio: r.TasksPerS / floorRate, CPURatio: cpu / floorCPU}
}

// runRounds runs floor, then rounds times harvest and floor, and returns
// the harvest run of the median CPU ratio (the lower middle of an even
// count) with every round and floor, the median ratios over the rounds
// and their spread. (harvest and floor are the
// real runs, or a test's fakes.)
func runRounds(ctx context.Context, rounds int, harvest func(context.Context) (Result, error), floor func(context.Context) (Floor, error)) (Result, error) {
	if rounds < 1 {
		return Result{}, fmt.Errorf("bench: rounds must be at least 1, got %d", rounds)
	}
	f, err := floor(ctx)
	if err != nil {
		return Result{}, err
	}
	floors := []Floor{f}
	runs := make([]Result, 0, rounds)
	out := make([]Round, 0, rounds)
	for k := range rounds {
		r, err := harvest(ctx)
		if err != nil {
			return r, fmt.Errorf("bench: round %d: %w", k+1, err)
		}
		f, err := floor(ctx)
		if err != nil {
			return r, fmt.Errorf("bench: round %d: %w", k+1, err)
		}
		floors = append(floors, f)
		runs = append(runs, r)
		out = append(out, between(r, floors[k], f))
	}
	// The median round (the lower middle of an even count) in detail.
	byCPU := make([]int, rounds)
	for i := range byCPU {
		byCPU[i] = i
	}
	slices.SortStableFunc(byCPU, func(a, b int) int { return cmp.Compare(out[a].CPURatio, out[b].CPURatio) })
	med := byCPU[(rounds-1)/2]
	r := runs[med]
	r.Rounds, r.Floors, r.MedianRound = out, floors, med+1
	all := pooled(floors)
	r.Floor = &all
	r.CPURatio = median(out, func(x Round) float64 { return x.CPURatio })
	r.RateRatio = median(out, func(x Round) float64 { return x.RateRatio })
	r.CPURatioSpread = spread(out, func(x Round) float64 { return x.CPURatio })
	r.RateRatioSpread = spread(out, func(x Round) float64 { return x.RateRatio })
	return r, nil
}

// pooled is the floors as one: their tasks over their makespans, their
// CPU over their tasks.
func pooled(fs []Floor) Floor {
	var p Floor
	cpu := 0.0
	for _, f := range fs {
		p.Procs = f.Procs
		p.Tasks += f.Tasks
		p.MakespanS += f.MakespanS
		cpu += f.CPUUS * float64(f.Tasks)
	}
	if p.Tasks > 0 && p.MakespanS > 0 {
		p.TasksPerS = float64(p.Tasks) / p.MakespanS
		p.CPUUS = cpu / float64(p.Tasks)
	}
	return p
}

// median is the median of v over rs (the mean of the middle two of an
// even count).
func median(rs []Round, v func(Round) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = v(r)
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func spread(rs []Round, v func(Round) float64) Spread {
	s := Spread{Min: v(rs[0]), Max: v(rs[0])}
	for _, r := range rs[1:] {
		s.Min, s.Max = min(s.Min, v(r)), max(s.Max, v(r))
	}
	return s
}
