// Package api holds the wire types and paths of the queue's user and admin
// REST API (/v1). The pilot endpoints' types live in pilotproto. Pure
// types: the server (package queue) and the client (queue/client) share them.
package api

// Paths of the user and admin endpoints.
const (
	PathJobs       = "/v1/jobs"        // POST submit, GET list
	PathJob        = "/v1/jobs/"       // + id: GET, DELETE
	PathUsers      = "/v1/users"       // GET
	PathUser       = "/v1/users/"      // + name: GET, PUT (admin)
	PathNodes      = "/v1/admin/nodes" // GET, PUT (admin)
	PathTokens     = "/v1/tokens"      // POST: a token for the caller (or, admin, for anyone); GET: the caller's tokens (admin: ?user=)
	PathToken      = "/v1/tokens/"     // + ID: DELETE revokes the caller's token ID (admin: ?user=)
	PathWhoami     = "/v1/whoami"      // GET
	DefaultSocket  = "/run/harvest/queue.sock"
	MaxPageLimit   = 1000
	DefaultPageLim = 100
)

// Bounds of the durations and counts the API takes (issue 35 item 8): a
// figure past them would overflow time.Duration or mean nothing real.
const (
	MaxTimeoutS = 365 * 24 * 3600 // a task's timeout_s: a year
	MaxNodes    = 1_000_000       // min_nodes, max_nodes, global_max_nodes
	MaxUnixTime = 253402300799    // 9999-12-31T23:59:59Z, the latest end a pilot may be given
)

// Roles.
const (
	RoleUser  = "user"
	RoleAdmin = "admin"
	RolePilot = "pilot"
)

// Job states (JAliEn's job model).
const (
	JobWaiting  = "WAITING"
	JobRunning  = "RUNNING"
	JobDone     = "DONE"
	JobDoneWarn = "DONE_WARN"
	JobFailed   = "FAILED"
	JobKilled   = "KILLED"
	JobErrorEW  = "ERROR_EW"
)

// Task states.
const (
	TaskWaiting  = "WAITING"
	TaskAssigned = "ASSIGNED"
	TaskRunning  = "RUNNING"
	TaskDone     = "DONE"
	TaskErrorE   = "ERROR_E"
	TaskZombie   = "ZOMBIE"
	TaskExpired  = "EXPIRED"
	TaskKilled   = "KILLED"
)

// JobFinal reports whether a job state is final.
func JobFinal(state string) bool {
	switch state {
	case JobDone, JobDoneWarn, JobFailed, JobKilled, JobErrorEW:
		return true
	}
	return false
}

// Error is the body of every error answer: a message for people and a
// code for programs (errors.go maps it onto a sentinel error).
type Error struct {
	Error string `json:"error"`
	Code  Code   `json:"code,omitempty"`
}

// JobSpec is the body of POST /v1/jobs. Optional fields left out take the
// server's defaults (price 1, cores 1, max attempts 3, no timeout, expiry
// 7 days, output under the configured outputs root).
type JobSpec struct {
	Name        string   `json:"name,omitempty"`
	Dataset     string   `json:"dataset"`         // absolute path of the dataset directory
	Command     []string `json:"command"`         // argv; placeholders {input} {output} {job} {task}
	BatchSize   int      `json:"batch_size"`      // tasks per batch
	Price       *float64 `json:"price,omitempty"` // > 0
	Cores       *int     `json:"cores,omitempty"` // >= 1
	MaxAttempts *int     `json:"max_attempts,omitempty"`
	TimeoutS    int64    `json:"timeout_s,omitempty"` // per task, 0 = none
	ExpiryS     int64    `json:"expiry_s,omitempty"`  // 0 = the server default
	Output      string   `json:"output,omitempty"`    // output directory, inside the allowed roots
}

// TaskCounts counts a job's tasks by coarse state.
type TaskCounts struct {
	Total   int `json:"total"`
	Waiting int `json:"waiting"`
	Running int `json:"running"` // ASSIGNED, RUNNING or ZOMBIE
	Done    int `json:"done"`
	Failed  int `json:"failed"` // ERROR_E or EXPIRED after the last attempt
	Killed  int `json:"killed"`
}

// Job is a job as the API shows it. Times are Unix seconds (0 = not yet).
type Job struct {
	ID          int64      `json:"id"`
	Owner       string     `json:"owner"`
	Name        string     `json:"name,omitempty"`
	State       string     `json:"state"`
	Dataset     string     `json:"dataset"`
	OutputDir   string     `json:"output_dir"`
	Command     []string   `json:"command"`
	BatchSize   int        `json:"batch_size"`
	Price       float64    `json:"price"`
	Cores       int        `json:"cores"`
	MaxAttempts int        `json:"max_attempts"`
	TimeoutS    int64      `json:"timeout_s,omitempty"`
	SubmittedAt int64      `json:"submitted_at"`
	StartedAt   int64      `json:"started_at,omitempty"`
	FinishedAt  int64      `json:"finished_at,omitempty"`
	ExpiresAt   int64      `json:"expires_at"`
	Tasks       TaskCounts `json:"tasks"`
	// Sites says where the job's tasks ran (GET /v1/jobs/{id} only): per
	// site, the attempts done and failed there, by site name.
	Sites []JobSite `json:"sites,omitempty"`
}

// JobSite is the part of a job one site ran.
type JobSite struct {
	Site   string `json:"site"`
	Done   int    `json:"done"`
	Failed int    `json:"failed"`
}

// JobList is one page of GET /v1/jobs (newest first). Pass NextCursor as
// ?cursor= to get the next page; it is 0 on the last page.
type JobList struct {
	Jobs       []Job `json:"jobs"`
	NextCursor int64 `json:"next_cursor,omitempty"`
}

// User is a user's fair-share standing as GET /v1/users shows it.
type User struct {
	Name             string  `json:"name"`
	Priority         float64 `json:"priority"`
	MaxCores         int     `json:"max_cores"`
	MaxCPUTime       float64 `json:"max_cpu_time"`
	MaxCost          float64 `json:"max_cost"`
	RunningCores     int     `json:"running_cores"`
	CPUTime24h       float64 `json:"cpu_time_24h"`
	Cost24h          float64 `json:"cost_24h"`
	ComputedPriority float64 `json:"computed_priority"`
	WaitingTasks     int     `json:"waiting_tasks"`
}

// UserList is the answer of GET /v1/users.
type UserList struct {
	Users []User `json:"users"`
}

// UserSettings is the body of PUT /v1/users/{name}: fields left out keep
// their value (the defaults for a new user).
type UserSettings struct {
	Priority   *float64 `json:"priority,omitempty"`
	MaxCores   *int     `json:"max_cores,omitempty"`
	MaxCPUTime *float64 `json:"max_cpu_time,omitempty"`
	MaxCost    *float64 `json:"max_cost,omitempty"`
	// Create allows a user the queue does not know yet to be created;
	// without it an unknown name is refused (a typo created a user).
	Create bool `json:"create,omitempty"`
}

// Nodes is the admin's floor and cap of pilot nodes, and the master's
// latest MiniNode recommendation (GET/PUT /v1/admin/nodes; PUT reads only
// min_nodes, max_nodes and global_max_nodes). MaxNodes 0 means no cap.
type Nodes struct {
	MinNodes       int   `json:"min_nodes"`
	MaxNodes       int   `json:"max_nodes"`
	GlobalMaxNodes int   `json:"global_max_nodes,omitempty"` // cap on pilots across all sites (0 = none)
	Recommendation int   `json:"recommendation,omitempty"`
	RecommendedAt  int64 `json:"recommended_at,omitempty"`
	PendingTasks   int   `json:"pending_tasks"`
	RunningTasks   int   `json:"running_tasks"`
}

// NodesSettings is the body of PUT /v1/admin/nodes.
type NodesSettings struct {
	MinNodes       *int `json:"min_nodes,omitempty"`
	MaxNodes       *int `json:"max_nodes,omitempty"`
	GlobalMaxNodes *int `json:"global_max_nodes,omitempty"`
}

// TokenRequest is the body of POST /v1/tokens. A user may only ask for
// their own user token (User empty or their own name); an admin may name
// any user and ask for role "admin".
type TokenRequest struct {
	User string `json:"user,omitempty"`
	Role string `json:"role,omitempty"`
	// Create (admin, for another user) allows a name that is neither a
	// user of the queue nor a Unix account; without it such a name is
	// refused as a likely typo.
	Create bool `json:"create,omitempty"`
	// TTLSeconds is the token's lifetime: 0 takes the queue's default
	// (--token-ttl; none: it never expires). A user may not ask for more
	// than the default; an admin may.
	TTLSeconds int64 `json:"ttl_s,omitempty"`
}

// MaxTokenTTL is the longest lifetime a token may be given.
const MaxTokenTTL = 10 * 366 * 24 * 3600

// Token is a newly created token; it is shown once and stored hashed.
type Token struct {
	User      string `json:"user"`
	Role      string `json:"role"`
	Token     string `json:"token"`
	ExpiresAt int64  `json:"expires_at,omitempty"` // Unix seconds; absent: never
}

// TokenInfo is a stored token as GET /v1/tokens shows it: its ID (the
// start of the token's sha256, all the queue keeps of it), its user and
// role, when it was made and when it expires (Unix seconds; absent:
// never).
type TokenInfo struct {
	ID        string `json:"id"`
	User      string `json:"user"`
	Role      string `json:"role"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt int64  `json:"expires_at,omitempty"`
}

// TokenList is the answer of GET /v1/tokens.
type TokenList struct {
	Tokens []TokenInfo `json:"tokens"`
}

// TokenIDLen is how many hex digits of a token's hash its ID shows.
const TokenIDLen = 12

// Whoami tells a caller who the queue thinks they are.
type Whoami struct {
	User string `json:"user"`
	Role string `json:"role"`
	Via  string `json:"via"` // "socket" or "token"
}
