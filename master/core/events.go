package core

import (
	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Event is one input of Step: a worker request, a queue answer, a tick of
// the clock, or an order of the driver.
type Event interface{ event() }

// ReqID names a worker request; its Reply carries the same id.
type ReqID uint64

// Worker requests. Each is answered by exactly one Reply with its Req, in
// the Ready of the same Step or, for a parked long-poll, of a later one.
type (
	// Register is a worker's (re)registration.
	Register struct {
		Req ReqID
		workerproto.RegisterRequest
	}
	// Pull asks for batches; with nothing to hand it is parked until work
	// appears or its wait ends.
	Pull struct {
		Req ReqID
		workerproto.PullRequest
	}
	// Results reports finished tasks.
	Results struct {
		Req ReqID
		workerproto.ResultsRequest
	}
	// Heartbeat proves a worker alive and lists what it holds.
	Heartbeat struct {
		Req ReqID
		workerproto.HeartbeatRequest
	}
	// Gone: the worker's request ended before its answer (connection
	// closed). A parked pull is forgotten; no Reply follows.
	Gone struct{ Req ReqID }
)

// PilotGone: a restored worker's pilot is gone: nothing listens at its
// address (connection refused: its process ended, kill -9, crash, the end
// of its job), or its host answers nothing (down or cut off), so the
// worker will not come back in time. The driver probes the addresses
// Restored lists.
type PilotGone struct {
	Worker string
	Why    string // what the probe found (for the log)
}

// Answers of the queue calls of an earlier Ready.
type (
	// Pulled answers Ready.Pull.
	Pulled struct {
		Resp pilotproto.PullResponse
		Err  error
	}
	// Reported answers Ready.Report.
	Reported struct {
		Resp pilotproto.ResultsResponse
		Err  error
	}
	// Beaten answers Ready.Beat: the heartbeat's answer, then the
	// recommendation's (sent only when the heartbeat succeeded).
	Beaten struct {
		Resp   pilotproto.HeartbeatResponse
		Err    error
		RecErr error
	}
	// Leased answers Ready.Lease.
	Leased struct {
		Lease pilotproto.Lease
		Err   error
	}
)

// Orders of the driver.
type (
	// Tick: time passed (the driver ticks at Next()).
	Tick struct{}
	// Stop starts a graceful stop: unstarted tasks go back to the queue,
	// results are flushed, the lease is released.
	Stop struct{}
	// CommitFailed: the ops of the last Ready could not be stored
	// (ErrFenced: a newer master owns the checkpoint). Memory is ahead of
	// the checkpoint now, so the core stops; the next master restores
	// from the checkpoint.
	CommitFailed struct{ Err error }
)

func (Register) event()     {}
func (Pull) event()         {}
func (Results) event()      {}
func (Heartbeat) event()    {}
func (Gone) event()         {}
func (PilotGone) event()    {}
func (Pulled) event()       {}
func (Reported) event()     {}
func (Beaten) event()       {}
func (Leased) event()       {}
func (Tick) event()         {}
func (Stop) event()         {}
func (CommitFailed) event() {}

// Ready is what the driver must do, in this order: commit Ops in one
// checkpoint transaction; then send Replies; then start the queue calls
// (each answers with its event). Done ends the master (Err nil: a graceful
// stop completed).
type Ready struct {
	Ops     []Op
	Replies []Reply

	// Lazy: Ops may be committed later than the rest is carried out (with
	// the next Ready whose ops are not lazy, in order): they only add
	// tasks the master had not held or forget results the queue
	// acknowledged. Lost in a crash, they lose nothing: the queue
	// requeues the tasks a new master's first heartbeat does not list,
	// and takes a result it already has again as a duplicate.
	Lazy bool

	Pull   *pilotproto.PullRequest
	Report *pilotproto.ResultsRequest
	Beat   *Beat
	Lease  *pilotproto.LeaseRequest

	Done bool
	Err  error
}

// Beat is the periodic queue heartbeat and the recommendation sent after it.
type Beat struct {
	Heartbeat      pilotproto.HeartbeatRequest
	Recommendation pilotproto.RecommendationRequest
	// Final is a stopping master's last heartbeat, sent for its lost task
	// time: no recommendation goes with it.
	Final bool
}

// Reply answers one worker request: exactly one of the bodies, or Err
// (ErrNotMaster, ErrUnknownWorker).
type Reply struct {
	Req       ReqID
	Register  *workerproto.RegisterResponse
	Pull      *workerproto.PullResponse
	Results   *workerproto.ResultsResponse
	Heartbeat *workerproto.HeartbeatResponse
	Err       error
}

// OpKind is a checkpoint change.
type OpKind int

// Checkpoint changes, applied in order in one transaction.
const (
	OpAdd        OpKind = iota // store Task as pending (replacing a stale row of its attempt)
	OpAssign                   // Ref is in Batch of Worker
	OpRequeue                  // Ref is pending again
	OpFinish                   // Ref has Result, to report to the queue
	OpDelete                   // the queue acknowledged Ref's result: forget it
	OpEstimate                 // Job's task duration estimate is Est
	OpFenceCheck               // write nothing, but fail if a newer master owns the checkpoint
	OpCapacity                 // the capacity rule's state is Capacity
	OpWorker                   // Worker's pilot listens at Address
)

// Op is one checkpoint change.
type Op struct {
	Kind   OpKind
	Ref    pilotproto.TaskRef
	Task   *pilotproto.Task   // OpAdd (a pointer: ops are copied and kept in bulk, a task is ~200 bytes)
	Worker string             // OpAssign
	Batch  int64              // OpAssign
	Result *pilotproto.Result // OpFinish
	Job    int64              // OpEstimate
	Est    *Estimator         // OpEstimate (a pointer: rare, and an op is kept per task change)
	// Capacity is the capacity rule's state (OpCapacity): a new master
	// resumes the search where this one was.
	Capacity *capacity.State
	Address  string // OpWorker
}

// Row is one task as the checkpoint stores it (what New restores).
type Row struct {
	Task   pilotproto.Task
	State  State
	Worker string             // StateAssigned
	Batch  int64              // StateAssigned
	Result *pilotproto.Result // StateFinal
	// Address is where Worker's pilot listened (StateAssigned; "" if
	// the checkpoint does not know).
	Address string
}

// State of a task held by the master.
type State string

// Task states (also the checkpoint's values).
const (
	StatePending  State = "pending"  // held, not handed out
	StateAssigned State = "assigned" // in a batch handed to a worker
	StateFinal    State = "final"    // result stored, not yet acknowledged by the queue
)
