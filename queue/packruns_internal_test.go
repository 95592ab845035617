package queue

import (
	"reflect"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/store"
)

// A pull's compact answer made from its runs unpacks to exactly the tasks
// Pull answers, as pilotproto.Pack of those tasks does: jobs whose runs
// alternate (an order), retries, directories that are not plain, an
// empty pull.
func TestPackRunsUnpacksToPullsTasks(t *testing.T) {
	a := liveJob{ID: 1, Owner: "alice", Dataset: "/data/a", OutputDir: "/out/a", Command: []string{"prog", "{input}"}, Cores: 1, BatchSize: 2, TimeoutS: 60}
	b := liveJob{ID: 2, Owner: "bob", Dataset: "/data/b/", OutputDir: "out/b", Command: []string{"other"}, Cores: 2, BatchSize: 1}
	c := liveJob{ID: 3, Owner: "carol", Dataset: "/", OutputDir: "/out/c", Command: []string{"c"}, BatchSize: 3}
	taken := func(job int64, idx int, name string, attempt int) store.TakenTask {
		return store.TakenTask{ID: job<<32 | int64(idx), Name: name, Attempt: attempt}
	}
	for _, tc := range []struct {
		name string
		runs []run
	}{
		{"empty", nil},
		{"one job", []run{{a, []store.TakenTask{taken(1, 0, "e0", 1), taken(1, 1, "e1", 1)}}}},
		{"jobs in turn", []run{
			{a, []store.TakenTask{taken(1, 0, "e0", 1), taken(1, 1, "e1", 1)}},
			{b, []store.TakenTask{taken(2, 4, "x", 3)}},
			{a, []store.TakenTask{taken(1, 2, "e2", 1), taken(1, 3, "e 3", 2)}},
			{c, []store.TakenTask{taken(3, 0, "top", 1)}},
		}},
		{"job after job", []run{
			{b, []store.TakenTask{taken(2, 0, "y", 1)}},
			{c, []store.TakenTask{taken(3, 1, "z", 1), taken(3, 2, "w", 1)}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tasksOf(tc.runs)
			p := packRuns(tc.runs)
			w := pilotproto.PullWire{Packed: p}
			got, err := w.Unpack()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Tasks, want) {
				t.Fatalf("unpacked\n%+v\nwant (Pull's tasks)\n%+v", got.Tasks, want)
			}
			packed := pilotproto.Pack(want)
			viaPack, err := packed.Unpack()
			if err != nil {
				t.Fatal(err)
			}
			if len(want) > 0 && !reflect.DeepEqual(viaPack, want) {
				t.Fatalf("pilotproto.Pack of Pull's tasks unpacks to\n%+v", viaPack)
			}
			if (p.Order != nil) != (packed.Order != nil) {
				t.Errorf("an order %v, pilotproto.Pack's %v", p.Order, packed.Order)
			}
		})
	}
}
