package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// Batches go to SQLite as one JSON array bound to one parameter and read
// with json_each, so a chunk of hundreds of rows is a handful of
// statements: each statement through database/sql and cgo costs tens of
// microseconds on a loaded machine, more than SQLite's own work per row.

func jsonArg(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// jobRow is a job's state and counters, read and written inside one
// transaction so the state can be derived in Go (rules.JobState).
type jobRow struct {
	id       int64
	state    string
	owner    string
	cores    int
	price    float64
	maxTries int
	started  int64
	finished int64
	c        rules.Counts
	from     string // the state when read
	seq      int64  // in the overlay: journal entry of its last change not folded yet
	since    int64  // in the overlay: Unix ns when it became dirty
}

// settleJob derives j's state from its counters (rules.JobState) and
// returns the change, if any (its finish time set or cleared with it).
func settleJob(j *jobRow, now time.Time) *JobChange {
	j.state = rules.JobState(j.from, j.started > 0, j.c)
	if j.state == j.from {
		return nil
	}
	j.finished = 0
	if api.JobFinal(j.state) {
		j.finished = ms(now)
	}
	return &JobChange{j.id, j.from, j.state}
}

var readJobsSQL = hot(`SELECT id, state, owner, cores, price, max_attempts, started_at, finished_at,
		n_total, n_waiting, n_active, n_done, n_failed, n_killed FROM jobs WHERE id IN (SELECT value FROM jsonb_each(?))`)

// readJobs reads the rows of the jobs ids (missing ones are left out).
func (s *Store) readJobs(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]*jobRow, error) {
	out := make(map[int64]*jobRow, len(ids))
	err := s.eachRow(ctx, tx, readJobsSQL, ids, func(rows *sql.Rows) error {
		j := &jobRow{}
		if err := rows.Scan(&j.id, &j.state, &j.owner, &j.cores, &j.price, &j.maxTries, &j.started, &j.finished,
			&j.c.Total, &j.c.Waiting, &j.c.Active, &j.c.Done, &j.c.Failed, &j.c.Killed); err != nil {
			return err
		}
		j.from = j.state
		out[j.id] = j
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

var writeJobsSQL = hot(`UPDATE jobs SET started_at = d.v->>1, finished_at = d.v->>2,
		n_waiting = d.v->>3, n_active = d.v->>4, n_done = d.v->>5, n_failed = d.v->>6, n_killed = d.v->>7
		FROM (SELECT value AS v FROM jsonb_each(?)) AS d WHERE jobs.id = d.v->>0`)

// writeJobStatesSQL sets the state apart, of the jobs whose state changed
// only: an UPDATE that assigns an indexed column rewrites its index entry
// even when the value stays, and a hand-out or a batch of results moves
// the counters of hundreds of jobs but the state of few.
var writeJobStatesSQL = hot(`UPDATE jobs SET state = d.v->>1
		FROM (SELECT value AS v FROM jsonb_each(?)) AS d WHERE jobs.id = d.v->>0`)

// writeJobs derives each job's state from its counters (rules.JobState),
// writes counters and state back in one statement and returns the state
// changes.
func (s *Store) writeJobs(ctx context.Context, tx *sql.Tx, jobs map[int64]*jobRow, now time.Time) ([]JobChange, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	var changes []JobChange
	rows := make([][]any, 0, len(jobs))
	var states [][]any
	for _, j := range jobs {
		if ch := settleJob(j, now); ch != nil {
			changes = append(changes, *ch)
			states = append(states, []any{j.id, j.state})
		}
		rows = append(rows, []any{j.id, j.started, j.finished, j.c.Waiting, j.c.Active, j.c.Done, j.c.Failed, j.c.Killed})
	}
	arg, err := jsonArg(rows)
	if err != nil {
		return nil, err
	}
	if _, err = s.exec(ctx, tx, writeJobsSQL, arg); err != nil {
		return nil, fmt.Errorf("update jobs: %w", err)
	}
	if len(states) > 0 {
		if arg, err = jsonArg(states); err != nil {
			return nil, err
		}
		if _, err = s.exec(ctx, tx, writeJobStatesSQL, arg); err != nil {
			return nil, fmt.Errorf("update job states: %w", err)
		}
	}
	return changes, nil
}
