package api

// Wire types of a queue shared by several clusters (sites). Each site runs
// an agent; the agent of the site that hosts the queue calls it in
// process, the others over HTTP with an agent token (role agent, user =
// the site's name). Each site's pilots form a pool with its own master and
// lease, and the queue splits the work among the pools.
const (
	PathAgentRegister = "/v1/agent/register" // POST AgentRegistration -> AgentWelcome (agent)
	PathAgentRound    = "/v1/agent/round"    // POST AgentRound -> AgentPlan (agent)
	PathAgentEnd      = "/v1/agent/end"      // POST PilotEnd -> {} (agent)
	PathSites         = "/v1/sites"          // GET SiteList (admin)
	PathSite          = "/v1/admin/sites/"   // + name: POST creates the site and returns its agent token; PUT SiteSettings (admin)

	// RoleAgent is a remote site's agent.
	RoleAgent = "agent"
	// LocalSite is the default name of the site whose agent hosts the queue.
	LocalSite = "local"
)

// AgentRegistration is the body of POST /v1/agent/register: an agent
// starting against a remote queue registers the token its pilots will
// present (stored hashed; pilots with it act for this site's pool only).
type AgentRegistration struct {
	PilotToken string `json:"pilot_token"`
	Adapter    string `json:"adapter,omitempty"`
	Version    string `json:"version,omitempty"`
}

// AgentWelcome is the answer: the site the agent token belongs to, the
// queue's lease TTL (for the agent's log) and its allowed roots (where
// inputs must resolve; the site's confined tasks may read them).
type AgentWelcome struct {
	Site         string   `json:"site"`
	LeaseTTLS    int64    `json:"lease_ttl_s"`
	AllowedRoots []string `json:"allowed_roots,omitempty"`
}

// AgentRound is the body of POST /v1/agent/round: what the agent saw this
// round, before it decides.
type AgentRound struct {
	// Held is the pilots the site holds (running, queued and on their way).
	Held int `json:"held"`
	// Idle is the idle nodes of the site's cluster.
	Idle int `json:"idle"`
}

// AgentPlan is what the site's agent applies this round.
type AgentPlan struct {
	Site string `json:"site"`
	// PendingTasks is the site's share of the waiting tasks; RunningTasks
	// the tasks its pool holds. The agent's policy sizes the pool by them.
	PendingTasks int `json:"pending_tasks"`
	RunningTasks int `json:"running_tasks"`
	SlotsPerNode int `json:"slots_per_node"`
	// Recommended is the pool master's MiniNode recommendation (capped).
	Recommended int `json:"recommended"`
	// Busy maps the pool's pilot ids to whether they run tasks.
	Busy map[string]bool `json:"busy,omitempty"`
	// Master is the pilot id of the pool's live master ("" if none): it
	// is released last among equals.
	Master string `json:"master,omitempty"`
	// MinNodes is the admin's floor for the site; MaxNodes the smallest of
	// the admin's site cap, the site's part of the global cap and its
	// master's capacity cap (0 = no cap).
	MinNodes int `json:"min_nodes"`
	MaxNodes int `json:"max_nodes"`
	// Paused: no new pilots (the admin paused the site, or the global cap
	// leaves it no pilot).
	Paused bool `json:"paused,omitempty"`
	// Weight and Allowance, for the agent's log (see Site).
	Weight    float64 `json:"weight"`
	Allowance int     `json:"allowance"`
}

// PilotEnd is the body of POST /v1/agent/end: the agent pulled a pilot's
// end in (Unix seconds); the pool's master hears of it at its next
// heartbeat and plans no batch past it.
type PilotEnd struct {
	Pilot string `json:"pilot"`
	End   int64  `json:"end"`
}

// Site is one site as GET /v1/sites shows it.
type Site struct {
	Name string `json:"name"`
	// Alive: its agent or master called within the silence timeout.
	Alive    bool  `json:"alive"`
	AgentAt  int64 `json:"agent_at,omitempty"`  // Unix seconds of the agent's last round
	MasterAt int64 `json:"master_at,omitempty"` // and of the master's last call
	// RelativeTurnaround compares the site's turnaround with the other
	// sites' on the same jobs (1 = average, 2 = twice as slow; 0 = not
	// known yet). Weight follows from it.
	RelativeTurnaround float64 `json:"relative_turnaround,omitempty"`
	Weight             float64 `json:"weight"`
	// Share is the waiting tasks its agent sees; Running the tasks its
	// pool holds; Allowance the most it may hold (-1 = no limit).
	Share     int `json:"share"`
	Running   int `json:"running"`
	Allowance int `json:"allowance"`
	// Held and Idle are what its agent reported.
	Held int `json:"held"`
	Idle int `json:"idle"`
	// MinNodes and MaxNodes are the admin's settings for the site;
	// EffectiveMax the cap its agent applies (see AgentPlan.MaxNodes).
	MinNodes     int  `json:"min_nodes"`
	MaxNodes     int  `json:"max_nodes"`
	EffectiveMax int  `json:"effective_max"`
	Paused       bool `json:"paused,omitempty"`
	// Capacity is the master's degradation-aware cap and phase.
	CapacityCap   int    `json:"capacity_cap,omitempty"`
	CapacityPhase string `json:"capacity_phase,omitempty"`
	// The master's lease.
	Epoch  int64  `json:"epoch"`
	Master string `json:"master,omitempty"`
	// What the site yielded since the queue started.
	PilotHours  float64 `json:"pilot_hours"`
	UsefulHours float64 `json:"useful_hours"`
	Done        int64   `json:"done"`
	Failed      int64   `json:"failed"`
	Interrupted int64   `json:"interrupted"`
}

// SiteList is the answer of GET /v1/sites.
type SiteList struct {
	Sites []Site `json:"sites"`
	// GlobalMaxNodes is the admin's cap on pilots across all sites.
	GlobalMaxNodes int `json:"global_max_nodes"`
}

// SiteSettings is the body of PUT /v1/admin/sites/{name}: fields left out
// keep their value.
type SiteSettings struct {
	MinNodes *int  `json:"min_nodes,omitempty"`
	MaxNodes *int  `json:"max_nodes,omitempty"`
	Paused   *bool `json:"paused,omitempty"`
}

// SiteToken is the answer of POST /v1/admin/sites/{name}: the site's agent
// token, shown once.
type SiteToken struct {
	Site  string `json:"site"`
	Token string `json:"token"`
}
