// Package pilotproto holds the wire types of the queue's pilot endpoints,
// shared by the queue (server side, in the agent) and the master (client
// side, in a pilot). JSON over HTTP; every request carries the pilot token
// (Authorization: Bearer ...) and every write from a master carries its
// lease epoch, so a deposed master's writes are refused (fencing).
//
// Endpoints (all POST, JSON in and out, errors as {"error": "..."}):
//
//	/v1/pilot/lease           LeaseRequest          -> Lease
//	/v1/pilot/pull            PullRequest           -> PullResponse
//	/v1/pilot/results         ResultsRequest        -> ResultsResponse
//	/v1/pilot/heartbeat       HeartbeatRequest      -> HeartbeatResponse
//	/v1/pilot/recommendation  RecommendationRequest -> {}
//
// A write with an epoch other than the current lease's gets 409 Conflict
// with the code "stale_epoch"; with an expired lease, 409 and
// "lease_expired" (queue/api: api.ErrStaleEpoch, api.ErrLeaseExpired).
package pilotproto

// Paths of the pilot endpoints.
const (
	PathLease          = "/v1/pilot/lease"
	PathPull           = "/v1/pilot/pull"
	PathResults        = "/v1/pilot/results"
	PathHeartbeat      = "/v1/pilot/heartbeat"
	PathRecommendation = "/v1/pilot/recommendation"
)

// LeaseRequest asks for (or renews) the master lease. A pilot that holds
// the lease renews it by sending its current Epoch; a new asker sends 0.
type LeaseRequest struct {
	PilotID string `json:"pilot_id"` // the batch system's id of the asking pilot
	Address string `json:"address"`  // the master URL the asker would publish ("http://host:port")
	Epoch   int64  `json:"epoch,omitempty"`
	// Release gives the lease up (a master stopping gracefully: scancel,
	// time limit), so the next asker becomes master at once instead of
	// after the TTL. Only the holder, with its current epoch, may release.
	Release bool `json:"release,omitempty"`
	// Peek only asks where the master is: never granted, nothing
	// written (a pilot held off the lease after a failed master start
	// still finds another pilot's master for its worker). A queue older
	// than Peek refuses it (unknown field): the worker then waits.
	Peek bool `json:"peek,omitempty"`
}

// Lease is the answer: Granted says whether the asker is (still) master.
// When not granted, Holder/Address tell workers where the master is.
type Lease struct {
	Granted   bool   `json:"granted"`
	Epoch     int64  `json:"epoch"`
	Holder    string `json:"holder"`     // pilot id of the current master
	Address   string `json:"address"`    // the current master's URL
	ExpiresAt int64  `json:"expires_at"` // Unix seconds
	TTLSecond int64  `json:"ttl_s"`
	// TTLMS is the TTL in milliseconds (a TTL under a second reads 0 in
	// TTLSecond); the master renews from it. 0 from an older queue.
	TTLMS int64 `json:"ttl_ms,omitempty"`
	// LeftMS is how long the lease still runs, in milliseconds, as the
	// queue saw it when it answered: a pilot waiting for a dead master's
	// lease asks again when it runs out (a duration, so the two hosts'
	// clocks need not agree; ExpiresAt, whole seconds, made pilots ask up
	// to a second early and poll). 0 from an older queue.
	LeftMS int64 `json:"left_ms,omitempty"`
}

// PullRequest asks for up to Max waiting tasks in fair-share order. The
// queue marks them ASSIGNED to this epoch before answering.
type PullRequest struct {
	Epoch int64 `json:"epoch"`
	Max   int   `json:"max"`
	// Compact asks the HTTP API for the answer in the compact form
	// (PullWire: each job's fields once); without it, a pilot older than
	// the queue gets PullResponse's form. The queue in process ignores it.
	Compact bool `json:"compact,omitempty"`
}

// Task is one task handed to the master.
type Task struct {
	ID        int64    `json:"id"`
	JobID     int64    `json:"job_id"`
	Owner     string   `json:"owner"`
	Attempt   int      `json:"attempt"`    // 1 for the first try
	Name      string   `json:"name"`       // the dataset entry's name
	Input     string   `json:"input"`      // absolute path of the dataset entry ({input})
	Output    string   `json:"output"`     // absolute path for this task's output ({output})
	OutputDir string   `json:"output_dir"` // the job's output directory (logs go under it)
	WorkDir   string   `json:"work_dir,omitempty"`
	Command   []string `json:"command"` // argv with placeholders {input} {output} {job} {task}
	Env       []string `json:"env,omitempty"`
	BatchSize int      `json:"batch_size"`
	Cores     int      `json:"cores"`
	TimeoutS  int64    `json:"timeout_s,omitempty"` // per-task timeout, 0 = none
}

// PullResponse carries the tasks and the jobs cancelled since the last
// exchange, whose running tasks the master must stop.
type PullResponse struct {
	Tasks         []Task  `json:"tasks"`
	CancelledJobs []int64 `json:"cancelled_jobs,omitempty"`
}

// Result statuses.
const (
	StatusDone        = "done"        // exit code 0
	StatusFailed      = "failed"      // non-zero exit: counts as an attempt (ERROR_E)
	StatusTimeout     = "timeout"     // per-task timeout: counts as an attempt
	StatusInterrupted = "interrupted" // pilot ended (SIGTERM, limit): requeued, not an attempt
	StatusKilled      = "killed"      // stopped because its job was cancelled
)

// Result is the outcome of one attempt of one task. Reporting the same
// (TaskID, Attempt) twice is harmless: the queue applies it once.
type Result struct {
	TaskID int64 `json:"task_id"`
	// JobID is the task's job, if the reporter knows it. The queue looks
	// tasks up by TaskID and never trusts it.
	JobID      int64  `json:"job_id,omitempty"`
	Attempt    int    `json:"attempt"`
	Status     string `json:"status"`
	ExitCode   int    `json:"exit_code"`
	StartedAt  int64  `json:"started_at"` // Unix milliseconds
	DurationMS int64  `json:"duration_ms"`
	Pilot      string `json:"pilot,omitempty"` // pilot id that ran it
	ErrorTail  string `json:"error_tail,omitempty"`
}

// ResultsRequest reports results.
type ResultsRequest struct {
	Epoch   int64    `json:"epoch"`
	Results []Result `json:"results"`
}

// ResultsResponse says how many results were applied (duplicates are
// acknowledged but not applied again).
type ResultsResponse struct {
	Applied    int `json:"applied"`
	Duplicates int `json:"duplicates"`
	// Ignored counts results for an attempt that is no longer current (the
	// task was requeued, killed or finished) or for an unknown task: they
	// are acknowledged and change nothing.
	Ignored int `json:"ignored,omitempty"`
}

// TaskRef names one attempt of one task.
type TaskRef struct {
	TaskID  int64 `json:"task_id"`
	Attempt int   `json:"attempt"`
}

// PilotStatus tells the agent which pilots are running tasks (busy pilots
// are released last).
type PilotStatus struct {
	PilotID  string `json:"pilot_id"`
	Busy     bool   `json:"busy"`
	Deadline int64  `json:"deadline,omitempty"` // Unix seconds
	// Confinement says whether the pilot's tasks run confined, as its
	// worker reported it ("yes (Landlock ABI 7)", "no (...)").
	Confinement string `json:"confinement,omitempty"`
}

// HeartbeatRequest keeps running tasks alive (no heartbeat for the zombie
// timeout makes them ZOMBIE, then EXPIRED and requeued) and renews the lease.
// The master lists the attempts it holds in Ranges (about one range per
// grant); Running, the same task by task, is an older master's form, still
// accepted (a request may hold both).
type HeartbeatRequest struct {
	Epoch   int64         `json:"epoch"`
	Ranges  *Ranges       `json:"ranges,omitempty"`
	Running []TaskRef     `json:"running,omitempty"`
	Pilots  []PilotStatus `json:"pilots,omitempty"`
	// LostMS is the run time of the attempts interrupted since the last
	// heartbeat the queue answered (their pilot ended under them); the
	// master requeues those itself, so the queue hears of the lost work
	// only here.
	LostMS int64 `json:"lost_ms,omitempty"`
}

// HeartbeatResponse lists jobs cancelled since the last exchange, and
// the pilots whose end the agent pulled in (pilot id -> new end, Unix
// seconds): the master plans no batch past it and tells their workers.
type HeartbeatResponse struct {
	CancelledJobs []int64          `json:"cancelled_jobs,omitempty"`
	Deadlines     map[string]int64 `json:"deadlines,omitempty"`
	LeaseExpires  int64            `json:"lease_expires"`
}

// RecommendationRequest is the master's MiniNode recommendation and the
// demand figures the agent's policy reads.
type RecommendationRequest struct {
	Epoch        int64 `json:"epoch"`
	MinNodes     int   `json:"min_nodes"`
	PendingTasks int   `json:"pending_tasks"`
	RunningTasks int   `json:"running_tasks"`
	SlotsPerNode int   `json:"slots_per_node"`
	// Slots is the pool's worker slots (all its pilots): with several
	// sites, how much the pool may hold ahead follows from it.
	Slots int `json:"slots,omitempty"`
	// MaxNodes is the master's degradation-aware cap on its pool (0 =
	// none): tasks slow down past this size. CapacityPhase says where the
	// search stands (grow, search, hold, probe).
	MaxNodes      int    `json:"max_nodes,omitempty"`
	CapacityPhase string `json:"capacity_phase,omitempty"`
}
