// Package workerproto holds the master <-> worker protocol (pilot to
// pilot; pilotproto is the queue <-> pilot one): JSON over HTTP on the
// pilots' network, every request authenticated with the pilot token
// (Authorization: Bearer ...). Workers pull: a worker registers, then asks
// for work with a long-poll; the master answers with batches as soon as it
// has some or empty after the wait. Results go back in batches.
//
//	POST /v1/worker/register   RegisterRequest  -> RegisterResponse
//	POST /v1/worker/pull       PullRequest      -> PullResponse
//	POST /v1/worker/results    ResultsRequest   -> ResultsResponse (leaving: deregister)
//	POST /v1/worker/heartbeat  HeartbeatRequest -> HeartbeatResponse
//
// Errors are {"error": "..."}: 404 with ErrUnknownWorker (register
// again), 503 with ErrNotMaster (this process is no longer the master: go
// back to the lease), 401 for a bad token, 400 for bad input.
package workerproto

import (
	"errors"
	"fmt"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// Paths of the worker endpoints.
const (
	PathRegister  = "/v1/worker/register"
	PathPull      = "/v1/worker/pull"
	PathResults   = "/v1/worker/results"
	PathHeartbeat = "/v1/worker/heartbeat"
)

// Error texts that workers recognise.
const (
	ErrUnknownWorker = "unknown worker"
	ErrNotMaster     = "not the master"
)

// RegisterRequest introduces a worker (again, after a master change or a
// lost connection). Held lists the tasks it still runs or has queued;
// Finished lists tasks whose results it has not had acknowledged yet, so a
// new master does not requeue them.
type RegisterRequest struct {
	WorkerID string `json:"worker_id"`
	PilotID  string `json:"pilot_id"`
	Slots    int    `json:"slots"`
	Capacity int    `json:"capacity"` // tasks it holds at most (running + queued)
	Deadline int64  `json:"deadline_ms,omitempty"`
	// Confinement says how the worker isolates its tasks (shown on the
	// agent's status page).
	Confinement string `json:"confinement,omitempty"`
	// Address is the URL the worker's pilot listens at. A new master
	// that finds nothing listening there (connection refused) knows the
	// pilot's process is gone and requeues the worker's batches at once,
	// instead of after the reconnect grace.
	Address  string               `json:"address,omitempty"`
	Held     []pilotproto.TaskRef `json:"held,omitempty"`
	Finished []pilotproto.TaskRef `json:"finished,omitempty"`
}

// RegisterResponse lists held tasks the master does not (or no longer)
// assign to this worker: the worker stops them and reports nothing.
// CompactResults says the master reads ResultsWire's plain lists: a
// master older than the worker does not say so (it would drop the lists
// as an unknown field and acknowledge results it never stored), and gets
// every result in full.
type RegisterResponse struct {
	Epoch          int64                `json:"epoch"`
	Drop           []pilotproto.TaskRef `json:"drop,omitempty"`
	CompactResults bool                 `json:"compact_results,omitempty"`
}

// PullRequest asks for up to Free tasks (the master may hand a whole batch
// even if it is larger); WaitMS bounds the long-poll.
type PullRequest struct {
	WorkerID string `json:"worker_id"`
	Free     int    `json:"free"`
	WaitMS   int64  `json:"wait_ms"`
	// Compact asks for the batches in the compact form (PullWire: the
	// job's fields once per batch); without it a worker older than the
	// master gets PullResponse's form. The master in process ignores it.
	Compact bool `json:"compact,omitempty"`
}

// Batch is a group of tasks of one job handed to one worker, written
// thus for a worker older than the master (PullWire is the compact form).
type Batch struct {
	ID    int64             `json:"id"`
	Tasks []pilotproto.Task `json:"tasks"`
}

// BatchWire is a batch in the compact form: its job's fields once, then
// the entries (pilotproto.Packed). The full form {"id", "tasks"} is the
// same thing with the tasks alone.
type BatchWire struct {
	ID int64 `json:"id"`
	pilotproto.Packed
}

// PullWire is the pull answer in the compact form.
type PullWire struct {
	Batches  []BatchWire `json:"batches,omitempty"`
	KillJobs []int64     `json:"kill_jobs,omitempty"`
}

// PackPull is resp in the compact form.
func PackPull(resp PullResponse) PullWire {
	w := PullWire{Batches: make([]BatchWire, len(resp.Batches)), KillJobs: resp.KillJobs}
	for i, b := range resp.Batches {
		w.Batches[i] = BatchWire{ID: b.ID, Packed: pilotproto.Pack(b.Tasks)}
	}
	return w
}

// Unpack is the pull answer w carries (a master older than the worker
// sends every batch's tasks in full: the same thing to Unpack).
func (w *PullWire) Unpack() (PullResponse, error) {
	resp := PullResponse{KillJobs: w.KillJobs}
	if len(w.Batches) > 0 {
		resp.Batches = make([]Batch, len(w.Batches))
	}
	for i := range w.Batches {
		b := &w.Batches[i]
		tasks, err := b.Unpack()
		if err != nil {
			return PullResponse{}, fmt.Errorf("batch %d: %w", b.ID, err)
		}
		resp.Batches[i] = Batch{ID: b.ID, Tasks: tasks}
	}
	return resp, nil
}

// PullResponse carries batches, and jobs whose tasks must be killed.
type PullResponse struct {
	Batches  []Batch `json:"batches,omitempty"`
	KillJobs []int64 `json:"kill_jobs,omitempty"`
}

// ResultsRequest reports finished tasks; the master stores them before it
// answers, so an answered result is never lost. Leaving is a stopping
// worker's last word (deregistration): the master requeues at once every
// task it handed to the worker that these results do not settle (a batch
// whose pull answer was still on its way) and forgets the worker, instead
// of waiting for the worker timeout.
type ResultsRequest struct {
	WorkerID string              `json:"worker_id"`
	Results  []pilotproto.Result `json:"results"`
	Leaving  bool                `json:"leaving,omitempty"`
}

// ResultsWire is a results report on the wire: plain successes as
// columns (pilotproto.Plain: a few bytes per task, the batch's first id
// once), the rest in full. A worker older than the master sends
// ResultsRequest's form, all in Results: the same thing to Unpack.
type ResultsWire struct {
	WorkerID string              `json:"worker_id"`
	Plain    []pilotproto.Plain  `json:"plain,omitempty"`
	Results  []pilotproto.Result `json:"results,omitempty"`
	Leaving  bool                `json:"leaving,omitempty"`
}

// PackResults is req in the compact form.
func PackResults(req ResultsRequest) ResultsWire {
	w := ResultsWire{WorkerID: req.WorkerID, Leaving: req.Leaving}
	w.Plain, w.Results = pilotproto.PackPlain(req.Results)
	return w
}

// Unpack is the report w carries: the plain successes, then the rest. A
// malformed list is refused.
func (w *ResultsWire) Unpack() (ResultsRequest, error) {
	pw := pilotproto.ResultsWire{Plain: w.Plain, Results: w.Results}
	r, err := pw.Unpack()
	if err != nil {
		return ResultsRequest{}, err
	}
	return ResultsRequest{WorkerID: w.WorkerID, Results: r.Results, Leaving: w.Leaving}, nil
}

// Validate checks a results report.
func (w *ResultsWire) Validate() error {
	if w.WorkerID == "" {
		return errors.New("worker_id is empty")
	}
	return nil
}

// ResultsResponse acknowledges every result of the request (applied or
// recognised as a duplicate).
type ResultsResponse struct {
	Accepted int `json:"accepted"`
}

// HeartbeatRequest proves the worker is alive while its tasks run. With
// Complete set, Held lists every task the worker has (queued, running, or
// finished with its result not yet acknowledged): a task the master
// handed to it long ago that it does not hold was lost on the way (a pull
// answer that never arrived) and is requeued. (Workers before this
// release also sent "running", the same tasks again less the queued and
// finished ones, which no master read; a master ignores it.)
type HeartbeatRequest struct {
	WorkerID string               `json:"worker_id"`
	Held     []pilotproto.TaskRef `json:"held,omitempty"`
	Complete bool                 `json:"complete,omitempty"`
}

// HeartbeatResponse carries jobs whose tasks must be killed.
type HeartbeatResponse struct {
	KillJobs []int64 `json:"kill_jobs,omitempty"`
	// DeadlineMS, when set, is the worker's pilot's new end (Unix ms):
	// the agent pulled it in. The worker stops by then.
	DeadlineMS int64 `json:"deadline_ms,omitempty"`
}

// ErrorBody is the JSON error body.
type ErrorBody struct {
	Error string `json:"error"`
}

// Validate checks a registration.
func (r *RegisterRequest) Validate() error {
	switch {
	case r.WorkerID == "":
		return errors.New("worker_id is empty")
	case r.Slots < 1:
		return fmt.Errorf("slots %d: want at least 1", r.Slots)
	case r.Capacity < r.Slots:
		return fmt.Errorf("capacity %d below slots %d", r.Capacity, r.Slots)
	case r.Address != "":
		// A new master probes it (master.NothingListens, PathAlive).
		return pilotproto.CheckAddress(r.Address)
	}
	return nil
}

// Validate checks a pull.
func (r *PullRequest) Validate() error {
	if r.WorkerID == "" {
		return errors.New("worker_id is empty")
	}
	if r.Free < 0 || r.WaitMS < 0 {
		return errors.New("free and wait_ms must not be negative")
	}
	return nil
}

// Validate checks a results report.
func (r *ResultsRequest) Validate() error {
	if r.WorkerID == "" {
		return errors.New("worker_id is empty")
	}
	for _, res := range r.Results {
		switch res.Status {
		case pilotproto.StatusDone, pilotproto.StatusFailed, pilotproto.StatusTimeout,
			pilotproto.StatusInterrupted, pilotproto.StatusKilled:
		default:
			return fmt.Errorf("task %d: unknown status %q", res.TaskID, res.Status)
		}
	}
	return nil
}

// Validate checks a heartbeat.
func (r *HeartbeatRequest) Validate() error {
	if r.WorkerID == "" {
		return errors.New("worker_id is empty")
	}
	return nil
}
