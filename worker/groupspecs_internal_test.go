package worker

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker/confine"
)

// specTasks are tasks of one job as a pull brings them, and some that are
// not: placeholders in the program and its arguments, ids of every
// length, an environment of their own or none.
func specTasks() []pilotproto.Task {
	cmds := [][]string{{"true"}, {"prog", "{input}", "-o", "{output}", "--job={job}", "{task}.log", "{{input}}", "{nope}"},
		{"{input}"}, {"/bin/{job}-{task}", "plain"}}
	ids := []int64{1, 9, 10, 99, 100, 12345678901, math.MaxInt64, -5, math.MinInt64}
	var ts []pilotproto.Task
	for i, id := range ids {
		for k, cmd := range cmds {
			t := pilotproto.Task{ID: id, JobID: int64(7 + 1000*k), Attempt: i * 37, Input: "/data/ds/e" + string(rune('a'+i)),
				Output: "/out/e" + string(rune('a'+i)), OutputDir: "/out", Command: cmd}
			if i%2 == 0 {
				t.Env = pilotproto.TaskEnv(t.JobID, id)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// A group's specs hold, for each task, what ExecRunner.Env, Substitute,
// LogName and tmpName say of it, with and without a site and a pilot.
func TestAGroupsSpecsAreEachTasksOwn(t *testing.T) {
	for _, r := range []*ExecRunner{{Path: DefaultPath}, {Path: "/opt/x:/usr/bin", Site: "site-a", Pilot: "4242"}} {
		ts := specTasks()
		const root = "/tmp/harvest-job-7-123"
		var g groupSpecs
		g.init(r, root, ts)
		for i := range ts {
			g.add(&ts[i], "/usr/bin/prog", nil)
		}
		specs := g.specs()
		if len(specs) != len(ts) {
			t.Fatalf("%d specs for %d tasks", len(specs), len(ts))
		}
		for i, task := range ts {
			want := confine.Spec{Path: "/usr/bin/prog", Argv: Substitute(task.Command, task), Env: r.Env(task, root+"/"+tmpName(task)),
				Out: pilotproto.LogName(task.ID, task.Attempt, "out"), Err: pilotproto.LogName(task.ID, task.Attempt, "err"), Tmp: tmpName(task)}
			if !reflect.DeepEqual(specs[i], want) {
				t.Fatalf("task %d (site %q):\n got %q\nwant %q", i, r.Site, specs[i], want)
			}
			// Each task's lists are its own: an append to one does not
			// reach the next's.
			if cap(specs[i].Env) != len(specs[i].Env) || cap(specs[i].Argv) != len(specs[i].Argv) {
				t.Fatalf("task %d: its lists are not capped", i)
			}
		}
	}
}

// The specs of a group of tasks without placeholders cost a few
// allocations for the whole group, not some per task: the task's strings
// are in one buffer, sized once.
func TestAGroupsSpecsAllocatePerGroup(t *testing.T) {
	r := &ExecRunner{Path: DefaultPath, Site: "s", Pilot: "p"}
	for _, n := range []int{1, 100, 1000} {
		ts := make([]pilotproto.Task, n)
		for i := range ts {
			ts[i] = pilotproto.Task{ID: int64(1e9 + i), JobID: 3, Attempt: i % 3, Input: "/d/x", Output: "/o/x", OutputDir: "/o",
				Command: []string{"true"}, Env: pilotproto.TaskEnv(3, int64(i))}
		}
		allocs := testing.AllocsPerRun(10, func() {
			var g groupSpecs
			g.init(r, "/tmp/harvest-job-3-1", ts)
			for i := range ts {
				g.add(&ts[i], "/usr/bin/true", nil)
			}
			n0 := cap(g.buf)
			g.specs()
			if cap(g.buf) != n0 {
				t.Fatalf("the buffer grew")
			}
		})
		// PATH, the site and pilot variables, the buffer, its spans and
		// tasks, the string, the environments, the specs.
		if allocs > 9 {
			t.Errorf("%d tasks: %.0f allocations, want at most 9", n, allocs)
		}
	}
}

// The buffer's size is what the tasks' strings take: digits says how many
// bytes AppendInt writes.
func TestDigits(t *testing.T) {
	for _, n := range []int64{0, 1, 9, 10, 99, 100, -1, -9, -10, -99, -100, math.MaxInt64, math.MinInt64, math.MaxInt64 / 10, 1e18} {
		if got, want := digits(n), len(pilotproto.LogName(n, 0, "")); got != want-len(".0.") {
			t.Errorf("digits(%d) = %d, want %d", n, got, want-len(".0."))
		}
	}
}

// Substitute expands as a strings.Replacer of the four placeholders does
// (it used to build one per task): random arguments made of placeholders,
// their pieces and text, with values that hold placeholders themselves.
func TestSubstituteIsAReplacer(t *testing.T) {
	pieces := []string{"{input}", "{output}", "{job}", "{task}", "{", "}", "{inp", "put}", "{{", "x", "é", "{jo", "b}", "{tas", "{{task}}", ""}
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		var b strings.Builder
		for range rng.IntN(6) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	for range 3000 {
		task := pilotproto.Task{ID: rng.Int64() - math.MaxInt64/2, JobID: rng.Int64N(1e6), Input: word(), Output: word()}
		argv := make([]string, rng.IntN(4))
		for i := range argv {
			argv[i] = word()
		}
		rep := strings.NewReplacer("{input}", task.Input, "{output}", task.Output, "{job}", itoa(task.JobID), "{task}", itoa(task.ID))
		want := make([]string, len(argv))
		for i, a := range argv {
			want[i] = rep.Replace(a)
		}
		if got := Substitute(argv, task); !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
			t.Fatalf("Substitute(%q) with %+v = %q, want %q", argv, task, got, want)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// The job key the worker asks for every queued task is kept for the next
// task of the same job, and only for one that gives the same key.
func TestAJobKeyIsEachTasksOwn(t *testing.T) {
	mk := func(job int64, out, work, in string) pilotproto.Task {
		return pilotproto.Task{JobID: job, OutputDir: out, WorkDir: work, Input: in}
	}
	tasks := []pilotproto.Task{mk(1, "/o", "", "/d/a"), mk(1, "/o", "", "/d/b"), mk(2, "/o", "", "/d/a"), mk(1, "/o2", "", "/d/a"),
		mk(1, "/o", "/w", "/d/a"), mk(1, "/o", "", "/e/a"), mk(1, "/o", "", ""), mk(1, "/o", "", "/d/a"), mk(1, "/o", "", "/d/a/b")}
	for _, roots := range [][]string{nil, {"/"}} {
		for _, jail := range []*confine.Launcher{nil, {Mode: confine.ModeRequire}} {
			r := &ExecRunner{Roots: roots, Jail: jail}
			for i, task := range tasks {
				fresh := &ExecRunner{Roots: roots, Jail: jail} // nothing kept
				if got, want := r.jobKey(task), fresh.jobKey(task); got != want {
					t.Fatalf("roots %v jail %v, task %d: key %q after the others, %q alone", roots, jail != nil, i, got, want)
				}
			}
		}
	}
}
