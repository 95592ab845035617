package bench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgscratch"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/store"
)

// WALFrames is what one pull of one task from each of Users jobs (one
// user each) and its results write to SQLite's WAL: exact frame counts,
// from SQLite (PRAGMA wal_checkpoint answers the WAL's frames; the store's
// writer never checkpoints, and nothing else runs), not times.
type WALFrames struct {
	Users   int   `json:"users"`
	Pull    int64 `json:"pull_frames"`
	Results int64 `json:"results_frames"`
	// PostgreSQL has no frames: the WAL bytes the server wrote instead
	// (pg_current_wal_insert_lsn deltas, the whole server's).
	PullBytes    int64 `json:"pull_wal_bytes,omitempty"`
	ResultsBytes int64 `json:"results_wal_bytes,omitempty"`
}

// MeasureWALFrames stores Users jobs of 20 entries in a fresh queue
// database under dir, then counts the frames of one pull of one task of
// each job (one store transaction) and of their done results (one more).
// The store alone: no fair-share order, no HTTP.
// On PostgreSQL (db a postgres:// URL, in a fresh schema of it) it
// measures WAL bytes instead.
func MeasureWALFrames(ctx context.Context, dir, db string, users int) (WALFrames, error) {
	w := WALFrames{Users: users}
	path := filepath.Join(dir, "walframes.db")
	pg := store.IsURL(db)
	if pg {
		u, drop, err := pgscratch.New(ctx, db, "harvest_walbytes_")
		if err != nil {
			return w, err
		}
		defer drop()
		path = u
	}
	s, err := store.Open(path)
	if err != nil {
		return w, err
	}
	defer s.Close()
	// A connection of its own for the checkpoints (PostgreSQL: the WAL
	// position), through the driver.
	ck, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000")
	if pg {
		ck, err = sql.Open("pgx", path)
	}
	if err != nil {
		return w, err
	}
	defer ck.Close()
	var mark int64 // PostgreSQL: the WAL position at the last mark
	frames := func(mode string) (int64, error) {
		if pg {
			at, err := pgscratch.WALPosition(ctx, ck)
			d := at - mark
			mark = at
			return d, err
		}
		var busy, log, done int64
		if err := ck.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &log, &done); err != nil || busy != 0 {
			return 0, fmt.Errorf("checkpoint %s: busy %d, %v", mode, busy, err)
		}
		return log, nil
	}
	t0 := time.Now()
	if _, _, err := s.DecideLease(ctx, "local", pilotproto.LeaseRequest{PilotID: "p1"}, t0, time.Hour); err != nil {
		return w, err
	}
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
	}
	takes := map[int64]int{} // one task of each job
	for u := range users {
		id, err := s.CreateJob(ctx, store.NewJob{Owner: fmt.Sprintf("u%05d", u), Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1,
			MaxAttempts: 1, Submitted: t0, Expires: t0.Add(time.Hour)})
		if err != nil {
			return w, err
		}
		if err := s.InsertTasks(ctx, id, names, 1000, nil); err != nil {
			return w, err
		}
		if err := s.ActivateJob(ctx, id, "/o", len(names)); err != nil {
			return w, err
		}
		takes[id] = 1
	}
	// A first round warms the tables (the jobs' first hand-out also
	// starts them: a state change the steady state does not make).
	var results []pilotproto.Result
	for round := range 2 {
		if _, err := frames("TRUNCATE"); err != nil {
			return w, err
		}
		taken, err := s.Assign(ctx, "local", 1, t0, takes)
		if err != nil {
			return w, err
		}
		if w.Pull, err = frames("PASSIVE"); err != nil {
			return w, err
		}
		results = results[:0]
		for _, ts := range taken.Tasks {
			for _, tk := range ts {
				results = append(results, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone, DurationMS: 1000})
			}
		}
		if len(results) != users {
			return w, fmt.Errorf("round %d: pulled %d tasks, want %d", round, len(results), users)
		}
		if _, err := frames("TRUNCATE"); err != nil {
			return w, err
		}
		if _, err := s.ApplyResults(ctx, "local", 1, t0, results); err != nil {
			return w, err
		}
		if w.Results, err = frames("PASSIVE"); err != nil {
			return w, err
		}
	}
	if pg {
		w.PullBytes, w.ResultsBytes, w.Pull, w.Results = w.Pull, w.Results, 0, 0
	}
	return w, nil
}
