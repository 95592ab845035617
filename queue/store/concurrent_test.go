package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgtest"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// Several agents on one PostgreSQL database (each a Store of its own, as
// a process would open it), their pools' masters pulling from the same
// jobs and reporting at once: every entry is handed out once, every
// result counts once, and the counters equal the entries.
func TestAgentsPullingAtOnceTakeDisjointGrants(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("several processes write one database on PostgreSQL only: run with HARVEST_TEST_DB=postgres")
	}
	ctx := context.Background()
	url := pgtest.URL(t)
	const agents, jobs, entries = 4, 6, 200
	stores := make([]*Store, agents)
	for i := range stores {
		s, err := Open(url) // the first creates the schema, the others find it
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
		if _, d, err := s.DecideLease(ctx, fmt.Sprintf("p%d", i), pilotproto.LeaseRequest{PilotID: "m"}, t0, time.Hour); err != nil || !d.Granted {
			t.Fatal(d, err)
		}
	}
	takes := map[int64]int{}
	for range jobs {
		names := make([]string, entries)
		for i := range names {
			names[i] = fmt.Sprint(i)
		}
		takes[job(t, stores[0], t0, names...)] = 7
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, agents)
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool := fmt.Sprintf("p%d", i)
			for {
				got, err := s.Assign(ctx, pool, 1, t0, takes)
				if err != nil {
					errs <- err
					return
				}
				var rs []pilotproto.Result
				for _, ts := range got.Tasks {
					for _, tk := range ts {
						rs = append(rs, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone, DurationMS: 10})
					}
				}
				mu.Lock()
				for _, r := range rs {
					seen[r.TaskID]++
				}
				mu.Unlock()
				if len(rs) == 0 {
					if p, _, err := s.Demand(ctx); err != nil || p == 0 {
						errs <- err
						return
					}
					continue // the rest is held by another agent's pull
				}
				if a, err := s.ApplyResults(ctx, pool, 1, t0, rs); err != nil || len(a.Outcomes) != len(rs) {
					errs <- fmt.Errorf("results: %+v %v", a, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != jobs*entries {
		t.Fatalf("%d entries handed out, want %d", len(seen), jobs*entries)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("task %d handed out %d times", id, n)
		}
	}
	for id := range takes {
		j, err := stores[1].Job(ctx, id)
		if err != nil || j.Tasks.Done != entries || j.Tasks.Waiting != 0 || j.Tasks.Running != 0 || j.State != "DONE" {
			t.Fatalf("job %d: %+v %v", id, j, err)
		}
	}
	pools, err := stores[2].Outstanding(ctx)
	if err != nil || len(pools) != 0 {
		t.Fatalf("outstanding after all results: %v %v", pools, err)
	}
}
