package httpapi_test

import (
	"github.com/harvest-hpc/harvest/internal/pgtest"

	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// crashLedger is what the clients were told (acknowledged) across the
// queue's lives.
type crashLedger struct {
	mu        sync.Mutex
	jobs      map[int64]int       // acknowledged submissions: entries
	cancelled map[int64]bool      // acknowledged cancels
	done      map[int64]int64     // task id: its job, for acknowledged done results
	ranAfter  map[int64]time.Time // a cancelled job's task handed out after its cancel: when
}

// TestKill9AtRandomPointsKeepsTheQueueWhole kills the queue process with
// SIGKILL at random moments of a mixed load: a master pulling and
// reporting (done and failed results), users submitting small jobs and
// one of 100,000 entries, cancelling jobs, an admin changing a quota.
// After every restart: the database passes integrity_check, every
// acknowledged job is there whole (its entries all stored), every job's
// counters equal its tasks by state, no acknowledged cancel has a live
// task, no task was handed out after its job's cancel was acknowledged,
// and no task has two done results applied. The seed is logged (set
// HARVEST_CRASH_SEED to replay one).
func TestKill9AtRandomPointsKeepsTheQueueWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if pgtest.Enabled() {
		t.Skip("its checks read SQLite's file (integrity_check); the kill -9 test under load runs on PostgreSQL")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HARVEST_CRASH_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const kills = 6
	dir, small, toks := childSetup(t, "s", 20, map[string]string{"alice": api.RoleUser, "bob": api.RoleUser, "root": api.RoleAdmin})
	big := filepath.Join(dir, "data", "big")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100_000; i++ {
		if err := os.WriteFile(filepath.Join(big, fmt.Sprintf("b%06d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dbPath := filepath.Join(dir, "queue.db")
	led := &crashLedger{jobs: map[int64]int{}, cancelled: map[int64]bool{}, done: map[int64]int64{}, ranAfter: map[int64]time.Time{}}
	epoch := int64(0)
	for life := 0; life <= kills; life++ {
		ch := startChild(t, dir, life)
		checkCrashInvariants(t, dbPath, led, life)
		if life == kills {
			ch.kill9()
			break
		}
		ctx, stop := context.WithCancel(context.Background())
		pilot := clientFor(t, ch.url, queuetest.PilotToken)
		l, err := pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m1", Address: "http://m1", Epoch: epoch})
		if err != nil || !l.Granted {
			t.Fatalf("life %d: lease: %+v %v", life, l, err)
		}
		epoch = l.Epoch
		var wg sync.WaitGroup
		run := func(fn func()) { wg.Add(1); go func() { defer wg.Done(); fn() }() }
		run(func() { crashMaster(ctx, pilot, epoch, led, rand.New(rand.NewPCG(seed, uint64(10+life)))) })
		run(func() {
			c := clientFor(t, ch.url, toks["alice"])
			for ctx.Err() == nil {
				j, err := c.Submit(ctx, api.JobSpec{Dataset: small, Command: []string{"p", "{input}"}, BatchSize: 2})
				if err != nil {
					return
				}
				led.mu.Lock()
				led.jobs[j.ID] = 20
				led.mu.Unlock()
			}
		})
		led.mu.Lock()
		bigAcked := false
		for _, n := range led.jobs {
			bigAcked = bigAcked || n == 100_000
		}
		led.mu.Unlock()
		var bigDone chan struct{}
		if !bigAcked && life >= 1 { // cut by the kill until one is acknowledged
			bigDone = make(chan struct{})
			run(func() {
				defer close(bigDone)
				j, err := submitLong(ctx, ch.url, toks["bob"], big)
				if err != nil {
					return
				}
				led.mu.Lock()
				led.jobs[j.ID] = 100_000
				led.mu.Unlock()
			})
		}
		run(func() {
			c := clientFor(t, ch.url, toks["alice"])
			r := rand.New(rand.NewPCG(seed, uint64(100+life)))
			for ctx.Err() == nil {
				led.mu.Lock()
				var ids []int64
				for id, n := range led.jobs {
					if n == 20 && !led.cancelled[id] {
						ids = append(ids, id)
					}
				}
				led.mu.Unlock()
				if len(ids) == 0 {
					time.Sleep(5 * time.Millisecond) // load pacing, not a wait for an event
					continue
				}
				id := ids[r.IntN(len(ids))]
				if _, err := c.Cancel(ctx, id); err != nil {
					return
				}
				led.mu.Lock()
				led.cancelled[id] = true
				led.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
		run(func() {
			c := clientFor(t, ch.url, toks["root"])
			r := rand.New(rand.NewPCG(seed, uint64(200+life)))
			for ctx.Err() == nil {
				n := 1 + r.IntN(40)
				if _, err := c.SetUser(ctx, "alice", api.UserSettings{MaxCores: &n}); err != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
		// From the fourth life on, the kill waits for the 100,000-entry
		// submission's answer (earlier ones cut it).
		if bigDone != nil && life >= 3 {
			select {
			case <-bigDone:
			case <-time.After(2 * time.Minute):
				t.Fatal("the 100,000-entry submission did not end")
			}
		}
		// The kill lands at a random moment of the load.
		time.Sleep(time.Duration(100+rng.IntN(900)) * time.Millisecond)
		ch.kill9()
		stop()
		wg.Wait()
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	big100k := 0
	for _, n := range led.jobs {
		if n == 100_000 {
			big100k++
		}
	}
	t.Logf("%d kills: %d jobs acknowledged (%d of 100,000 entries), %d cancels, %d tasks reported done", kills, len(led.jobs), big100k, len(led.cancelled), len(led.done))
	if len(led.cancelled) == 0 || len(led.done) == 0 || big100k != 1 {
		t.Fatalf("the load did too little to test anything: %d cancels, %d done, %d large submissions acknowledged", len(led.cancelled), len(led.done), big100k)
	}
}

// submitLong submits a large dataset with a client whose timeout fits it.
func submitLong(ctx context.Context, url, token, ds string) (api.Job, error) {
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Token, cfg.RetryFor, cfg.Timeout = url, token, 0, 60*time.Second
	c, err := client.New(cfg)
	if err != nil {
		return api.Job{}, err
	}
	return c.Submit(ctx, api.JobSpec{Dataset: ds, Command: []string{"p", "{input}"}, BatchSize: 10})
}

// crashMaster pulls and reports as a master does until the queue dies:
// most tasks done, some failed. It records every done result the queue
// acknowledged, and any task handed out after its job's cancel was.
func crashMaster(ctx context.Context, pilot *client.Client, epoch int64, led *crashLedger, r *rand.Rand) {
	for ctx.Err() == nil {
		led.mu.Lock()
		before := make(map[int64]bool, len(led.cancelled))
		for id := range led.cancelled {
			before[id] = true
		}
		led.mu.Unlock()
		p, err := pilot.Pull(ctx, pilotproto.PullRequest{Epoch: epoch, Max: 50})
		if err != nil {
			return
		}
		var res []pilotproto.Result
		job := map[int64]int64{}
		for _, tk := range p.Tasks {
			job[tk.ID] = tk.JobID
			if before[tk.JobID] {
				led.mu.Lock()
				led.ranAfter[tk.JobID] = time.Now()
				led.mu.Unlock()
			}
			st, code := pilotproto.StatusDone, 0
			if r.IntN(10) == 0 {
				st, code = pilotproto.StatusFailed, 1
			}
			res = append(res, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: st, ExitCode: code, DurationMS: 10, Pilot: "m1"})
		}
		if len(res) == 0 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if _, err := pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: epoch, Results: res}); err != nil {
			return
		}
		led.mu.Lock()
		for _, x := range res {
			if x.Status == pilotproto.StatusDone {
				led.done[x.TaskID] = job[x.TaskID]
			}
		}
		led.mu.Unlock()
	}
}

// checkCrashInvariants reads the database (through SQLite, read-only)
// right after a restart, before any new load.
func checkCrashInvariants(t *testing.T, path string, led *crashLedger, life int) {
	t.Helper()
	db := readDB(t, path)
	defer db.Close()
	var ok string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("life %d: integrity_check %q %v", life, ok, err)
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	for id, n := range led.jobs {
		var total, stored int
		if err := db.QueryRow(`SELECT n_total, (SELECT count(*) FROM tasks WHERE job_id = ?1) FROM jobs WHERE id = ?1`, id).Scan(&total, &stored); err != nil {
			t.Fatalf("life %d: acknowledged job %d: %v", life, id, err)
		}
		if total != n || stored != n {
			t.Fatalf("life %d: acknowledged job %d has %d of %d entries stored (n_total %d)", life, id, stored, n, total)
		}
	}
	rows, err := db.Query(`SELECT j.id, j.state, j.n_total, c.n_waiting, c.n_active, c.n_done, c.n_failed, c.n_killed,
		count(t.id), coalesce(sum(t.state = 'WAITING'), 0), coalesce(sum(t.state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE')), 0),
		coalesce(sum(t.state = 'DONE'), 0), coalesce(sum(t.state IN ('ERROR_E', 'EXPIRED')), 0), coalesce(sum(t.state = 'KILLED'), 0)
		FROM jobs j JOIN counts c ON c.job_id = j.id LEFT JOIN tasks t ON t.job_id = j.id WHERE j.state != 'SUBMITTING' GROUP BY j.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var state string
		var c, s [6]int
		if err := rows.Scan(&id, &state, &c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &s[0], &s[1], &s[2], &s[3], &s[4], &s[5]); err != nil {
			t.Fatal(err)
		}
		if c != s {
			t.Fatalf("life %d: job %d (%s): counters total/waiting/active/done/failed/killed %v, its tasks %v", life, id, state, c, s)
		}
		if led.cancelled[id] && (state != api.JobKilled || s[1]+s[2] != 0) {
			t.Fatalf("life %d: cancelled job %d is %s with %d waiting and %d active tasks", life, id, state, s[1], s[2])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, at := range led.ranAfter {
		t.Fatalf("life %d: a task of job %d was handed out at %s, after its cancel was acknowledged", life, id, at.Format(time.RFC3339Nano))
	}
	// Every done result applied is counted in its grant: a job whose
	// grants counted more done results than it has done entries applied
	// one twice.
	var twice int
	if err := db.QueryRow(`SELECT count(*) FROM counts c WHERE c.n_done != (SELECT coalesce(sum(g.done), 0) FROM grants g WHERE g.job_id = c.job_id)`).Scan(&twice); err != nil || twice != 0 {
		t.Fatalf("life %d: %d jobs have done results applied other than once per done entry (%v)", life, twice, err)
	}
	for id, job := range led.done {
		if led.cancelled[job] {
			continue // a result after the cancel is acknowledged and left alone: the task is KILLED
		}
		var st string
		if err := db.QueryRow(`SELECT state FROM tasks WHERE id = $1`, id).Scan(&st); err != nil && err != sql.ErrNoRows {
			t.Fatal(err)
		}
		if st != "" && st != api.TaskDone {
			t.Fatalf("life %d: task %d acknowledged done is %s", life, id, st)
		}
	}
}
