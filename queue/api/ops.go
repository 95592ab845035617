package api

// Wire types of the agent's operations endpoints, served on the queue's
// listeners next to /v1 (admin role unless noted).
const (
	PathHarvest     = "/v1/admin/harvest"       // GET state; PUT HarvestSettings (pause/resume)
	PathDrain       = "/v1/admin/drain"         // POST DrainRequest: pause and cancel every pilot
	PathTokenRotate = "/v1/admin/tokens/rotate" // POST TokenRotateRequest: revoke a user's tokens, make a new one
	PathAgent       = "/v1/admin/agent"         // GET AgentInfo: where the agent keeps its files
	PathStatus      = "/status"                 // the status page (user or admin)
	PathMetrics     = "/metrics"                // Prometheus metrics
)

// AgentInfo tells admin tools where the running agent keeps its files
// (harvest explain reads the dumped rounds from DumpDir).
type AgentInfo struct {
	Adapter  string `json:"adapter"`
	StateDir string `json:"state_dir"`
	// DumpDir is the agent's --dump-snapshots directory ("" = rounds are
	// not dumped).
	DumpDir string `json:"dump_dir"`
}

// HarvestState is the admin's run-time switches as the agent keeps them.
type HarvestState struct {
	// Paused: no new pilots are submitted (pilots already running stay,
	// and are still released for foreign jobs).
	Paused bool `json:"paused"`
	// PausedAt is Unix seconds of the last pause.
	PausedAt int64 `json:"paused_at,omitempty"`
	// Drain is set while a drain runs and after it is done, until resume.
	Drain *DrainState `json:"drain,omitempty"`
}

// DrainState is the progress of a drain.
type DrainState struct {
	// Now: busy pilots are cancelled too instead of finishing their batch.
	Now       bool  `json:"now"`
	StartedAt int64 `json:"started_at"`
	// Remaining is the number of pilots the last round saw and did not
	// cancel; -1 until a round has run since the drain started.
	Remaining int `json:"remaining"`
	// Busy is how many of the remaining pilots run tasks.
	Busy      int    `json:"busy"`
	Cancelled int    `json:"cancelled"`
	Done      bool   `json:"done"`
	DoneAt    int64  `json:"done_at,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// HarvestSettings is the body of PUT /v1/admin/harvest.
type HarvestSettings struct {
	Paused *bool `json:"paused"`
}

// DrainRequest is the body of POST /v1/admin/drain.
type DrainRequest struct {
	Now bool `json:"now"`
}

// TokenRotateRequest is the body of POST /v1/admin/tokens/rotate: every
// token of User with Role (user or admin, default user) is revoked and a
// new one is returned once.
type TokenRotateRequest struct {
	User string `json:"user"`
	Role string `json:"role,omitempty"`
}

// TokenRotation is the answer: the new token and how many were revoked.
type TokenRotation struct {
	Token   Token `json:"token"`
	Revoked int   `json:"revoked"`
}
