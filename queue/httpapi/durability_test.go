package httpapi_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/queuetest"
	"github.com/harvest-hpc/harvest/queue/store"
)

// child is a queue running as a separate process on a shared database.
type child struct {
	cmd *exec.Cmd
	url string
}

func startChild(t *testing.T, dir string, n int) *child {
	t.Helper()
	addr := filepath.Join(dir, fmt.Sprintf("addr-%d", n))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HARVEST_QUEUE_TEST_CHILD=serve", "HQ_DIR="+dir, "HQ_ADDR="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(addr); err == nil {
			return &child{cmd: cmd, url: string(b)}
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	t.Fatal("the queue process did not start")
	return nil
}

func (c *child) kill9() {
	c.cmd.Process.Kill() // SIGKILL: no flush, no close
	c.cmd.Wait()
}

func clientFor(t *testing.T, url, token string) *client.Client {
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Token, cfg.RetryFor, cfg.Timeout = url, token, 0, 5*time.Second
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestKill9MidLoadLosesAndDuplicatesNothing runs the queue as a real
// process, loads it like a master does (pull, report), kills it with
// SIGKILL in the middle of the load (four times), restarts it on the same
// database, and checks that every task ends DONE with its result applied
// exactly once.
func TestKill9MidLoadLosesAndDuplicatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const tasks = 600
	dir, ds, toks := childSetup(t, "t", tasks, map[string]string{"alice": api.RoleUser})
	tok := toks["alice"]

	ctx := context.Background()
	n := 0
	ch := startChild(t, dir, n)
	defer func() { ch.kill9() }()
	alice := clientFor(t, ch.url, tok)
	job, err := alice.Submit(ctx, api.JobSpec{Dataset: ds, Command: []string{"p", "{input}"}, BatchSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	pilot := clientFor(t, ch.url, queuetest.PilotToken)
	lease, err := pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m1", Address: "http://m1"})
	if err != nil || !lease.Granted {
		t.Fatal(lease, err)
	}
	epoch := lease.Epoch

	// restart brings a new process up after a kill and renews the lease.
	restart := func() {
		ch.kill9()
		n++
		ch = startChild(t, dir, n)
		pilot = clientFor(t, ch.url, queuetest.PilotToken)
		alice = clientFor(t, ch.url, tok)
		l, err := pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m1", Epoch: epoch})
		if err != nil || !l.Granted || l.Epoch != epoch {
			t.Fatalf("renewing the lease after restart: %+v %v", l, err)
		}
	}
	var held []pilotproto.Task // pulled, not yet acknowledged
	killAt := map[int]time.Duration{3: 0, 6: time.Millisecond, 9: 2 * time.Millisecond, 12: 500 * time.Microsecond}
	deadline := time.Now().Add(90 * time.Second)
	// A kill in flight: its victim and when it has landed. The round that
	// scheduled it waits for it at its end and restarts the victim if no
	// failed request did: every scheduled kill is one restart, whenever
	// it lands (it once landed after the job had finished, and the test
	// counted 3 restarts of 4).
	var victim *child
	var landed chan struct{}
	settleKill := func() {
		if landed == nil {
			return
		}
		<-landed
		if ch == victim {
			restart()
		}
		landed, victim = nil, nil
	}
	for round := 0; time.Now().Before(deadline); round++ {
		settleKill()
		if d, ok := killAt[round]; ok {
			// Kill while requests are in flight.
			victim, landed = ch, make(chan struct{})
			go func(c *child, done chan struct{}) { time.Sleep(d); c.cmd.Process.Kill(); close(done) }(ch, landed)
		}
		p, err := pilot.Pull(ctx, pilotproto.PullRequest{Epoch: epoch, Max: 40})
		if err != nil {
			restart() // tasks this pull may have assigned expire and come back
			continue
		}
		held = append(held, p.Tasks...)
		if len(held) == 0 {
			j, err := alice.Job(ctx, job.ID)
			if err != nil {
				restart()
				continue
			}
			if api.JobFinal(j.State) {
				break
			}
			time.Sleep(300 * time.Millisecond) // waiting for expired assignments to be requeued
			continue
		}
		var res []pilotproto.Result
		for _, tk := range held {
			res = append(res, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone, DurationMS: 1000, Pilot: "m1"})
		}
		for {
			if _, err := pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: epoch, Results: res}); err != nil {
				if !strings.Contains(err.Error(), "connection") && !strings.Contains(err.Error(), "EOF") {
					t.Fatalf("results: %v", err)
				}
				restart() // the same results again: idempotent
				continue
			}
			break
		}
		held = held[:0]
	}
	settleKill()
	// Every scheduled kill is one restart; a request that failed for
	// another reason (a client timeout on a loaded machine) restarts the
	// queue once more, one more kill -9 for the test: more, not fewer.
	if n < len(killAt) {
		t.Fatalf("the queue was restarted %d times, want at least %d", n, len(killAt))
	}
	j, err := alice.Job(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != api.JobDone || j.Tasks.Done != tasks {
		t.Fatalf("after the load: %s %+v", j.State, j.Tasks)
	}
	ch.kill9()

	q, err := queue.Open(childConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	db := readDB(t, filepath.Join(dir, "queue.db"))
	if n := count(t, db, `SELECT count(*) FROM tasks WHERE state != 'DONE'`); n != 0 {
		t.Fatalf("%d tasks are not DONE", n)
	}
	// Each done result applied is counted in its grant, once.
	if n := count(t, db, `SELECT coalesce(sum(done), 0) FROM grants`); n != tasks {
		t.Fatalf("%d done results applied, want exactly %d", n, tasks)
	}
	if n := count(t, db, `SELECT count(*) FROM exceptions WHERE state = 'DONE'`) + count(t, db, `SELECT count(*) FROM grants WHERE settled LIKE '%D%'`); n == 0 {
		t.Fatal("no grant says an entry is done")
	}
	if u, _ := q.User(ctx, "alice"); u.RunningCores != 0 {
		t.Fatalf("running cores after recovery: %d", u.RunningCores)
	}
	t.Logf("%d tasks, %d restarts, %d grants, %d requeued by expiry",
		tasks, n, count(t, db, `SELECT count(*) FROM grants`), count(t, db, `SELECT count(*) FROM tasks WHERE attempt > 1`))
}

// readDB opens a queue database read-only (WAL: it sees every commit),
// or the test's PostgreSQL schema (childSetup) in its place.
func readDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(path), "db")); err == nil && store.IsURL(string(b)) {
		db, err := sql.Open("pgx", string(b))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_query_only=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
