package pilotproto_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// queueTask is a task as the queue hands it out (queue.taskOf).
func queueTask(id, job int64, owner, dataset, outdir, name string, attempt int) pilotproto.Task {
	return pilotproto.Task{ID: id, JobID: job, Owner: owner, Attempt: attempt, Name: name,
		Input: filepath.Join(dataset, name), Output: filepath.Join(outdir, name), OutputDir: outdir,
		Command: []string{"prog", "{input}", "{output}"}, Env: pilotproto.TaskEnv(job, id),
		BatchSize: 4, Cores: 2, TimeoutS: 60}
}

// wire sends v through JSON into a fresh value of type T.
func wire[T any](t testing.TB, v any) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return out
}

func TestPackUnpackRoundTrip(t *testing.T) {
	odd := queueTask(9, 3, "carol", "/d3", "/o3", "x", 1)
	odd.Env = nil // not the queue's environment: travels in full
	renamed := queueTask(10, 3, "carol", "/d3", "/o3", "y", 1)
	renamed.Input = "/elsewhere/y"
	for _, tc := range []struct {
		name     string
		tasks    []pilotproto.Task
		jobs     int
		ordered  bool // Order is needed
		leftover int
	}{
		{"none", nil, 0, false, 0},
		{"one job", []pilotproto.Task{queueTask(1, 1, "alice", "/data/a", "/out/a", "e1", 1),
			queueTask(2, 1, "alice", "/data/a", "/out/a", "e2", 3)}, 1, false, 0},
		{"users interleaved keep their order", []pilotproto.Task{queueTask(1, 1, "alice", "/data/a", "/out/a", "e1", 1),
			queueTask(5, 2, "bob", "/", "/out/b", "f1", 1), queueTask(2, 1, "alice", "/data/a", "/out/a", "e2", 2),
			queueTask(6, 2, "bob", "/", "/out/b", "sub/f2", 1)}, 2, true, 0},
		{"odd tasks travel in full", []pilotproto.Task{odd, queueTask(1, 1, "alice", "/data/a", "/out/a", "e1", 1), renamed,
			queueTask(11, 3, "carol", "/d3", "/o3", "z", 1)}, 2, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pilotproto.Pack(tc.tasks)
			if len(p.Jobs) != tc.jobs || (p.Order != nil) != tc.ordered || len(p.Tasks) != tc.leftover {
				t.Fatalf("packed into %d jobs, order %v, %d full tasks: want %d, %v, %d", len(p.Jobs), p.Order, len(p.Tasks), tc.jobs, tc.ordered, tc.leftover)
			}
			w := wire[pilotproto.PullWire](t, pilotproto.PullWire{Packed: p, CancelledJobs: []int64{7}})
			got, err := w.Unpack()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.tasks
			if want == nil {
				want = []pilotproto.Task{}
			}
			if !reflect.DeepEqual(got.Tasks, want) || !reflect.DeepEqual(got.CancelledJobs, []int64{7}) {
				t.Fatalf("round trip changed the tasks:\ngot  %+v\nwant %+v", got.Tasks, want)
			}
		})
	}
}

// FuzzPackRoundTrip: whatever a task looks like, packing and unpacking
// it (through JSON) gives it back unchanged, compact or in full.
func FuzzPackRoundTrip(f *testing.F) {
	f.Add("/data/a", "/out/a", "e1", "", "", "", 1, true)
	f.Add("/", "/", "x", "/x", "/x", "", 2, true)
	f.Add("/data/./a", "/out/a/", "e1", "", "", "w", 1, true)
	f.Add("/data", "/out", "a/../b", "", "/out/b", "", 1, false)
	f.Add("", "", ".", "x", "", "", 0, true)
	f.Add(".", "..", "x", "", "", "", 1, true)
	f.Add("/data", "/out", "..", "", "", "", 1, true)
	f.Add("../d", "o/", "x", "", "", "", 1, true)
	f.Add("/data", "/out", "x", "/data//x", "/out/./x", "", 1, true)
	f.Fuzz(func(t *testing.T, dataset, outdir, name, input, output, workdir string, attempt int, env bool) {
		a := queueTask(3, 2, "bob", dataset, outdir, name, attempt)
		if input != "" {
			a.Input = input
		}
		if output != "" {
			a.Output = output
		}
		a.WorkDir = workdir
		if !env {
			a.Env = []string{"HARVEST_JOB=02", "HARVEST_TASK=3"}
		}
		b := queueTask(4, 2, "bob", dataset, outdir, name+"2", 1)
		c := queueTask(5, 1, "alice", "/d", "/o", "n", 1)
		tasks := []pilotproto.Task{a, c, b}
		w := wire[pilotproto.PullWire](t, pilotproto.PackPull(pilotproto.PullResponse{Tasks: tasks}))
		got, err := w.Unpack()
		if err != nil {
			t.Fatal(err)
		}
		// JSON carries strings as UTF-8: compare with what it makes of them.
		want := wire[[]pilotproto.Task](t, tasks)
		if !reflect.DeepEqual(got.Tasks, want) {
			t.Fatalf("round trip changed the tasks:\ngot  %+v\nwant %+v", got.Tasks, want)
		}
	})
}

func TestUnpackRefusesMalformedPulls(t *testing.T) {
	job := func(ids, names, attempts int) pilotproto.JobTasks {
		return pilotproto.JobTasks{JobID: 1, IDs: make([]int64, ids), Names: make([]string, names), Attempts: make([]int, attempts)}
	}
	for _, tc := range []struct {
		name string
		p    pilotproto.Packed
		msg  string
	}{
		{"fewer names than ids", pilotproto.Packed{Jobs: []pilotproto.JobTasks{job(2, 1, 2)}}, "as many of each"},
		{"fewer attempts than ids", pilotproto.Packed{Jobs: []pilotproto.JobTasks{job(2, 2, 1)}}, "as many of each"},
		{"an order too short", pilotproto.Packed{Jobs: []pilotproto.JobTasks{job(2, 2, 2)}, Order: []int{0}}, "order has 1 entries for 2 tasks"},
		{"an order past the jobs", pilotproto.Packed{Jobs: []pilotproto.JobTasks{job(1, 1, 1)}, Order: []int{2}}, "want 0..1"},
		{"a negative order", pilotproto.Packed{Jobs: []pilotproto.JobTasks{job(1, 1, 1)}, Order: []int{-1}}, "want 0..1"},
		{"an order naming a job twice too often", pilotproto.Packed{Jobs: []pilotproto.JobTasks{job(1, 1, 1)}, Tasks: []pilotproto.Task{{ID: 1}}, Order: []int{0, 0}}, "more entries of job 1"},
		{"an order naming too many full tasks", pilotproto.Packed{Jobs: []pilotproto.JobTasks{job(1, 1, 1)}, Tasks: []pilotproto.Task{{ID: 1}}, Order: []int{1, 1}}, "more full tasks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.p.Unpack(); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want an error containing %q", err, tc.msg)
			}
		})
	}
}

func TestResultsPackKeepsWhatTheQueueKeeps(t *testing.T) {
	results := []pilotproto.Result{
		{TaskID: 1 << 32, JobID: 1, Attempt: 1, Status: pilotproto.StatusDone, StartedAt: 1000, DurationMS: 10, Pilot: "p1"},
		{TaskID: 2, JobID: 1, Attempt: 2, Status: pilotproto.StatusFailed, ExitCode: 3, StartedAt: 1001, DurationMS: 4, Pilot: "p1", ErrorTail: "boom"},
		{TaskID: 3, JobID: 2, Attempt: 1, Status: pilotproto.StatusDone, StartedAt: 990, DurationMS: 7, Pilot: "p1"},
		{TaskID: 1<<32 + 1, JobID: 1, Attempt: 3, Status: pilotproto.StatusDone, StartedAt: 995, DurationMS: 3, Pilot: "p1"},
		{TaskID: 5, Attempt: 1, Status: pilotproto.StatusDone, StartedAt: 996, DurationMS: 5, Pilot: "p1"},
		{TaskID: 6, JobID: 1, Attempt: 1, Status: pilotproto.StatusDone, StartedAt: 999, DurationMS: 6, Pilot: "p2"},
		{TaskID: 7, JobID: 1, Attempt: 1, Status: pilotproto.StatusTimeout, StartedAt: 999, DurationMS: 60000, Pilot: "p2"},
		{TaskID: 8, JobID: 1, Attempt: 1, Status: pilotproto.StatusDone, ExitCode: 0, ErrorTail: "warning", Pilot: "p2"},
	}
	w := wire[pilotproto.ResultsWire](t, pilotproto.PackResults(pilotproto.ResultsRequest{Epoch: 4, Results: results}))
	// Plain successes as ranges by attempt and id: 3, 5..6 and 1<<32 at
	// attempt 1, 1<<32+1 at 3; the rest in full.
	if w.Ranges == nil || !reflect.DeepEqual(w.Ranges.N, []int64{1, 2, 1, 1}) || len(w.Results) != 3 || w.Plain != nil || w.Done != nil {
		t.Fatalf("%+v, want 4 ranges (of 1, 2, 1, 1 entries) and 3 full records", w)
	}
	if d := w.Ranges.First; !reflect.DeepEqual(d, []int64{3, 2, 1<<32 - 5, 1}) {
		t.Fatalf("first ids on the wire %v, want differences", d)
	}
	got, err := w.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != 4 || len(got.Results) != len(results) {
		t.Fatalf("epoch %d, %d results", got.Epoch, len(got.Results))
	}
	// What the queue keeps: each result's task, attempt and status, a
	// full record as it is, and a plain success's run time summed per
	// job (usage) and per report (the site's yield).
	by := map[[2]int64]pilotproto.Result{}
	sums := map[int64]int64{}
	for _, r := range got.Results {
		by[[2]int64{r.TaskID, int64(r.Attempt)}] = r
		if pilotproto.IsPlain(&r) {
			sums[r.TaskID>>32] += r.DurationMS
		}
	}
	for _, want := range results {
		g, ok := by[[2]int64{want.TaskID, int64(want.Attempt)}]
		if !ok {
			t.Fatalf("result %d/%d is missing", want.TaskID, want.Attempt)
		}
		if pilotproto.IsPlain(&want) {
			sums[want.TaskID>>32] -= want.DurationMS
			want = pilotproto.Result{TaskID: want.TaskID, Attempt: want.Attempt, Status: pilotproto.StatusDone, DurationMS: g.DurationMS}
		}
		if g != want {
			t.Fatalf("result came back as %+v, want %+v", g, want)
		}
	}
	for job, d := range sums {
		if d != 0 {
			t.Fatalf("job %d: run times sum %d ms off", job, d)
		}
	}
}

// The previous release's masters report plain successes per job with
// their sums (done): still accepted, each entry with an equal share.
func TestResultsUnpackReadsThePreviousForm(t *testing.T) {
	var w pilotproto.ResultsWire
	if err := json.Unmarshal([]byte(`{"epoch": 2, "done": [{"job_id": 1, "pilot": "p1", "ids": [11, 12], "attempts": [1, 2], "duration_ms": 13, "started_at": 990}],
		"plain": [{"ids": [5, 1], "attempts": [1, 1], "started_at": [100, -1], "duration_ms": [2, 3]}]}`), &w); err != nil {
		t.Fatal(err)
	}
	got, err := w.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	want := []pilotproto.Result{
		{TaskID: 11, JobID: 1, Attempt: 1, Status: pilotproto.StatusDone, StartedAt: 990, DurationMS: 7, Pilot: "p1"},
		{TaskID: 12, JobID: 1, Attempt: 2, Status: pilotproto.StatusDone, StartedAt: 990, DurationMS: 6, Pilot: "p1"},
		{TaskID: 5, Attempt: 1, Status: pilotproto.StatusDone, StartedAt: 100, DurationMS: 2},
		{TaskID: 6, Attempt: 1, Status: pilotproto.StatusDone, StartedAt: 99, DurationMS: 3},
	}
	if got.Epoch != 2 || !reflect.DeepEqual(got.Results, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestPlainUnpackRefusesMalformedLists(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    pilotproto.Plain
		msg  string
	}{
		{"no entries", pilotproto.Plain{}, "at least one"},
		{"fewer attempts", pilotproto.Plain{IDs: []int64{1, 1}, Attempts: []int{1}, StartedAt: []int64{0, 0}, DurationMS: []int64{0, 0}}, "as many"},
		{"fewer run times", pilotproto.Plain{IDs: []int64{1}, Attempts: []int{1}, StartedAt: []int64{0}}, "as many"},
		{"a negative run time", pilotproto.Plain{IDs: []int64{1}, Attempts: []int{1}, StartedAt: []int64{0}, DurationMS: []int64{-1}}, "negative"},
		{"ids that overflow", pilotproto.Plain{IDs: []int64{1 << 62, 1 << 62}, Attempts: []int{1, 1}, StartedAt: []int64{0, 0}, DurationMS: []int64{0, 0}}, "overflows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := pilotproto.ResultsWire{Plain: []pilotproto.Plain{tc.p}}
			if _, err := w.Unpack(); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want an error containing %q", err, tc.msg)
			}
		})
	}
}

func TestResultsUnpackRefusesBeforeAllocating(t *testing.T) {
	ids := make([]int64, pilotproto.MaxResults)
	w := pilotproto.ResultsWire{Done: []pilotproto.DoneGroup{
		{JobID: 1, IDs: ids, Attempts: make([]int, len(ids))}, {JobID: 2, IDs: ids, Attempts: make([]int, len(ids))}}}
	allocs := testing.AllocsPerRun(1, func() {
		if _, err := w.Unpack(); err == nil || !strings.Contains(err.Error(), "at most") {
			t.Fatalf("got %v", err)
		}
	})
	if allocs > 5 {
		t.Fatalf("%v allocations for a refused report", allocs)
	}
}

// benchTasks is one round of `harvest bench dispatch` at batch size 100:
// a 100-task pull of one job (users 1), or of 100 jobs of one task each
// (many users competing: each task is its own job).
func benchTasks(jobs int) []pilotproto.Task {
	tasks := make([]pilotproto.Task, 100)
	for i := range tasks {
		job := int64(4711 + i%jobs)
		tasks[i] = queueTask(int64(1e6+i), job, fmt.Sprintf("user%04d", job%10000), "/data/set",
			fmt.Sprintf("/out/job-%d", job), fmt.Sprintf("entry-%06d", i), 1)
	}
	return tasks
}

// benchResults is 100 plain successes of jobs jobs (task ids as the
// queue makes them: job<<32 | index), in the order a pull of that many
// jobs hands them out.
func benchResults(jobs int) []pilotproto.Result {
	rs := make([]pilotproto.Result, 100)
	for i := range rs {
		job := int64(4711 + i%jobs)
		rs[i] = pilotproto.Result{TaskID: job<<32 | int64(i/jobs), JobID: job, Attempt: 1, Status: pilotproto.StatusDone,
			StartedAt: 1795000000000 + int64(i), DurationMS: 3, Pilot: "1234567"}
	}
	return rs
}

// benchForms are the messages of one dispatch round, in the old form
// (what a pilot older than the queue sends and reads: tasks and results
// in full) and the new, each as encoded, decoded and unpacked.
func benchForms() []struct {
	name           string
	old, new       any
	decode         func([]byte) error
	decodeOld      func([]byte) error
	perTaskDivisor int
} {
	type form = struct {
		name           string
		old, new       any
		decode         func([]byte) error
		decodeOld      func([]byte) error
		perTaskDivisor int
	}
	var out []form
	for _, jobs := range []int{1, 100} {
		tasks := benchTasks(jobs)
		pull := pilotproto.PullResponse{Tasks: tasks}
		out = append(out, form{fmt.Sprintf("PilotPull/jobs=%d", jobs), pull, pilotproto.PackPull(pull),
			func(b []byte) error {
				var w pilotproto.PullWire
				if err := json.Unmarshal(b, &w); err != nil {
					return err
				}
				_, err := w.Unpack()
				return err
			},
			func(b []byte) error { var p pilotproto.PullResponse; return json.Unmarshal(b, &p) }, 100})
	}
	wp := workerproto.PullResponse{Batches: []workerproto.Batch{{ID: 9, Tasks: benchTasks(1)}}}
	out = append(out, form{"WorkerPull", wp, workerproto.PackPull(wp),
		func(b []byte) error {
			var w workerproto.PullWire
			if err := json.Unmarshal(b, &w); err != nil {
				return err
			}
			_, err := w.Unpack()
			return err
		},
		func(b []byte) error { var p workerproto.PullResponse; return json.Unmarshal(b, &p) }, 100})
	for _, jobs := range []int{1, 100} {
		rr := pilotproto.ResultsRequest{Epoch: 3, Results: benchResults(jobs)}
		out = append(out, form{fmt.Sprintf("PilotResults/jobs=%d", jobs), rr, pilotproto.PackResults(rr),
			func(b []byte) error {
				var w pilotproto.ResultsWire
				if err := json.Unmarshal(b, &w); err != nil {
					return err
				}
				_, err := w.Unpack()
				return err
			},
			func(b []byte) error { var r pilotproto.ResultsRequest; return json.Unmarshal(b, &r) }, 100})
	}
	// A worker's results: no job ids (the master knows them).
	wr := workerproto.ResultsRequest{WorkerID: "w-1234567", Results: benchResults(1)}
	for i := range wr.Results {
		wr.Results[i].JobID = 0
	}
	out = append(out, form{"WorkerResults", wr, workerproto.PackResults(wr),
		func(b []byte) error {
			var w workerproto.ResultsWire
			if err := json.Unmarshal(b, &w); err != nil {
				return err
			}
			_, err := w.Unpack()
			return err
		},
		func(b []byte) error { var r workerproto.ResultsRequest; return json.Unmarshal(b, &r) }, 100})
	return out
}

// BenchmarkWire: bytes per task on the wire and the CPU to encode and
// decode one 100-task message with encoding/json, old form against new
// (the new one's packing and unpacking included).
func BenchmarkWire(b *testing.B) {
	for _, f := range benchForms() {
		for _, side := range []struct {
			name   string
			v      any
			decode func([]byte) error
		}{{"old", f.old, f.decodeOld}, {"new", f.new, f.decode}} {
			msg, err := json.Marshal(side.v)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(f.name+"/"+side.name+"/encode", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					v := side.v
					switch v.(type) { // the packing is part of the new form's cost
					case pilotproto.PullWire:
						v = pilotproto.PackPull(pilotproto.PullResponse{Tasks: f.old.(pilotproto.PullResponse).Tasks})
					case workerproto.PullWire:
						v = workerproto.PackPull(f.old.(workerproto.PullResponse))
					case pilotproto.ResultsWire:
						v = pilotproto.PackResults(f.old.(pilotproto.ResultsRequest))
					case workerproto.ResultsWire:
						v = workerproto.PackResults(f.old.(workerproto.ResultsRequest))
					}
					if _, err := json.Marshal(v); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(msg))/float64(f.perTaskDivisor), "wireB/task")
			})
			b.Run(f.name+"/"+side.name+"/decode", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := side.decode(msg); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func TestTaskEnv(t *testing.T) {
	got := pilotproto.TaskEnv(12, 9223372036854775807)
	if want := []string{"HARVEST_JOB=12", "HARVEST_TASK=9223372036854775807"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("TaskEnv = %q, want %q", got, want)
	}
}

// JoinName is filepath.Join, whichever way it takes: dir + "/" + name
// for a plain dir and name, filepath.Join otherwise.
func TestJoinNameIsJoin(t *testing.T) {
	for _, dir := range []string{"/data/a", "/", "", ".", "..", "../d", "d", "/data/a/", "/data//a", "/data/./a", "/data/../a", "a/.."} {
		for _, name := range []string{"x", "", ".", "..", "a/b", "a//b", "/x", "x/", ".hidden", "..x"} {
			for _, plain := range []bool{pilotproto.PlainDir(dir), false} {
				if got, want := pilotproto.JoinName(dir, plain, name), filepath.Join(dir, name); got != want {
					t.Fatalf("JoinName(%q, %v, %q) = %q, want %q", dir, plain, name, got, want)
				}
			}
			if pilotproto.PlainDir(dir) && pilotproto.PlainName(name) && filepath.Join(dir, name) != dir+"/"+name {
				t.Fatalf("%q and %q are plain, but Join makes %q", dir, name, filepath.Join(dir, name))
			}
		}
	}
}

// An unpacked pull's tasks share one array of environments: a change to
// one task's never reaches another's.
func TestUnpackedTasksHaveTheirOwnEnv(t *testing.T) {
	tasks := []pilotproto.Task{queueTask(1, 1, "alice", "/data/a", "/out/a", "e1", 1), queueTask(2, 1, "alice", "/data/a", "/out/a", "e2", 1)}
	p := pilotproto.Pack(tasks)
	got, err := p.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	got[0].Env = append(got[0].Env, "X=1")
	got[0].Env[0] = "changed"
	if !reflect.DeepEqual(got[1].Env, pilotproto.TaskEnv(1, 2)) || !pilotproto.IsTaskEnv(got[1].Env, 1, 2) {
		t.Fatalf("the second task's environment is %q", got[1].Env)
	}
}
