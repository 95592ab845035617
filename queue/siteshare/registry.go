package siteshare

import (
	"math"
	"sort"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// Registry is the queue's memory of the sites: what each site's agent and
// master said last, the moving averages of turnaround, and what each site
// yielded. It turns them into a Plan: per site a weight, the share of the
// pending tasks its agent sees, how many tasks its pool may hold, and its
// cap of pilot nodes. No I/O and no clock (times are arguments); not safe
// for concurrent use (the queue guards it). It lives in memory: after a
// queue restart the figures are learnt again within a few tasks.
type Registry struct {
	cfg     Config
	tracker *Tracker
	sites   map[string]*site
}

type site struct {
	agentAt, masterAt, reportAt time.Time
	agent                       AgentReport
	master                      MasterReport
	pilots                      map[string]pilotSeen
	yield                       Yield
}

type pilotSeen struct {
	status pilotproto.PilotStatus
	at     time.Time
}

// AgentReport is what a site's agent says each round.
type AgentReport struct {
	// Held is the pilots the site holds (running and on their way).
	Held int `json:"held"`
	// Idle is the nodes the site could give pilots now.
	Idle int `json:"idle"`
}

// MasterReport is what a pool's master says with its recommendation.
type MasterReport struct {
	// Epoch is the master's lease epoch: a report of an older epoch never
	// replaces a newer one.
	Epoch int64 `json:"epoch"`
	// MinNodes is the master's MiniNode recommendation.
	MinNodes int `json:"min_nodes"`
	// Cap is the master's capacity cap (0 = none) and Phase its phase.
	Cap   int    `json:"cap,omitempty"`
	Phase string `json:"phase,omitempty"`
	// Slots is the pool's worker slots; SlotsPerNode the largest pilot's.
	Slots        int `json:"slots"`
	SlotsPerNode int `json:"slots_per_node"`
}

// Yield is what a site gave the harvest.
type Yield struct {
	// PilotSeconds integrates the pilots the agent reported held.
	PilotSeconds float64 `json:"pilot_seconds"`
	// UsefulSeconds sums the run time of the tasks done there.
	UsefulSeconds float64 `json:"useful_seconds"`
	Done          int64   `json:"done"`
	Failed        int64   `json:"failed"`
	Interrupted   int64   `json:"interrupted"`
}

// NewRegistry returns an empty registry; cfg must be valid.
func NewRegistry(cfg Config) *Registry {
	return &Registry{cfg: cfg, tracker: NewTracker(cfg.Alpha), sites: map[string]*site{}}
}

func (r *Registry) site(name string) *site {
	s := r.sites[name]
	if s == nil {
		s = &site{}
		r.sites[name] = s
	}
	return s
}

// Agent records a site agent's round and integrates its pilots into the
// site's yield (a gap longer than SilentAfter counts as SilentAfter: the
// agent was not there to say what it held).
//
// A round older than the one held is ignored: with several agents on one
// database a site's round may come both from the agent that heard it and,
// later, from the database.
func (r *Registry) Agent(name string, rep AgentReport, now time.Time) {
	s := r.site(name)
	if now.Before(s.agentAt) {
		return
	}
	if !s.agentAt.IsZero() && now.After(s.agentAt) {
		gap := min(now.Sub(s.agentAt), r.cfg.SilentAfter)
		s.yield.PilotSeconds += float64(max(s.agent.Held, 0)) * gap.Seconds()
	}
	s.agent, s.agentAt = rep, now
}

// Master records a pool master's report (its recommendation round).
func (r *Registry) Master(name string, rep MasterReport, now time.Time) {
	s := r.site(name)
	if rep.Epoch < s.master.Epoch {
		return
	}
	s.master, s.reportAt = rep, now
	if now.After(s.masterAt) {
		s.masterAt = now
	}
}

// Pilots records the pilots a pool's master listed in its heartbeat:
// whether each runs tasks (the agent releases busy pilots last) and its
// deadline.
func (r *Registry) Pilots(name string, pilots []pilotproto.PilotStatus, now time.Time) {
	s := r.site(name)
	if s.pilots == nil {
		s.pilots = map[string]pilotSeen{}
	}
	for _, p := range pilots {
		s.pilots[p.PilotID] = pilotSeen{status: p, at: now}
	}
	if now.After(s.masterAt) {
		s.masterAt = now
	}
}

// Seen records any other call from a site's master (pull, results,
// heartbeat): the site is alive.
func (r *Registry) Seen(name string, now time.Time) {
	s := r.site(name)
	if now.After(s.masterAt) {
		s.masterAt = now
	}
}

// Outcome of a finished attempt, as Result takes it.
type Outcome int

// Outcomes.
const (
	Done Outcome = iota
	Failed
	Interrupted
)

// Result records one finished attempt at a site: seconds from its hand-out
// to its result (turnaround) and its run time. Interrupted attempts (the
// pilot was released) count in the yield but say nothing about speed.
func (r *Registry) Result(name string, job int64, turnaround, run float64, out Outcome) {
	s := r.site(name)
	switch out {
	case Done:
		s.yield.Done++
		if run > 0 && !math.IsInf(run, 0) {
			s.yield.UsefulSeconds += run
		}
		r.tracker.Observe(name, job, turnaround, true)
	case Failed:
		s.yield.Failed++
		r.tracker.Observe(name, job, turnaround, false)
	case Interrupted:
		s.yield.Interrupted++
	}
}

// ForgetJob drops a finished job's turnaround figures.
func (r *Registry) ForgetJob(job int64) { r.tracker.ForgetJob(job) }

// Alive reports whether a site was heard from within SilentAfter.
func (r *Registry) Alive(name string, now time.Time) bool {
	s := r.sites[name]
	return s != nil && r.alive(s, now)
}

func (r *Registry) alive(s *site, now time.Time) bool {
	last := s.agentAt
	if s.masterAt.After(last) {
		last = s.masterAt
	}
	return !last.IsZero() && now.Sub(last) <= r.cfg.SilentAfter
}

// PlanInput is what the queue adds to the registry's memory.
type PlanInput struct {
	Now time.Time
	// Pending is the waiting tasks of live jobs (all sites).
	Pending int
	// Outstanding is the tasks each pool holds (handed out, not finished).
	Outstanding map[string]int
	// GlobalMax is the admin's cap on pilots across all sites (0 = none).
	GlobalMax int
	// SiteMax is the admin's cap per site (absent or 0 = none).
	SiteMax map[string]int
	// Sites lists sites to plan for even if never heard from (registered
	// sites); every site heard from is planned for too.
	Sites []string
}

// SitePlan is one site's part of the plan.
type SitePlan struct {
	Name     string  `json:"name"`
	Alive    bool    `json:"alive"`
	Relative float64 `json:"relative_turnaround,omitempty"`
	Weight   float64 `json:"weight"`
	// Share is the pending tasks the site's agent sees as its backlog.
	Share int `json:"share"`
	// Running is the tasks the pool holds.
	Running int `json:"running"`
	// Allowance is the most tasks the pool may hold; -1 = no limit (the
	// only live site).
	Allowance int `json:"allowance"`
	// MaxNodes caps the site's pilots: the admin's site cap, its part of
	// the global cap and its master's capacity cap; 0 = none.
	MaxNodes int `json:"max_nodes"`
	// NoPilots: the global cap leaves this site nothing (its agent submits
	// no pilot and releases the idle ones; busy ones finish their tasks).
	NoPilots bool `json:"no_pilots,omitempty"`
	// Recommended is the master's MiniNode recommendation, capped.
	Recommended int `json:"recommended"`
	// Busy maps the pool's pilots the master listed lately to whether
	// they run tasks.
	Busy         map[string]bool `json:"busy,omitempty"`
	SlotsPerNode int             `json:"slots_per_node"`
	Agent        AgentReport     `json:"agent"`
	Master       MasterReport    `json:"master"`
	Yield        Yield           `json:"yield"`
	AgentAt      time.Time       `json:"agent_at"`
	MasterAt     time.Time       `json:"master_at"`
}

// Plan splits the work among the sites, sorted by name.
func (r *Registry) Plan(in PlanInput) []SitePlan {
	for _, n := range in.Sites {
		r.site(n)
	}
	names := make([]string, 0, len(r.sites))
	for n := range r.sites {
		names = append(names, n)
	}
	sort.Strings(names)
	rel := r.tracker.Relative()
	views := make([]Site, len(names))
	plans := make([]SitePlan, len(names))
	live := 0
	for i, n := range names {
		s := r.sites[n]
		views[i] = Site{Name: n, Alive: r.alive(s, in.Now), Relative: rel[n]}
		if views[i].Alive {
			live++
		}
		rep := s.master
		if s.reportAt.IsZero() || in.Now.Sub(s.reportAt) > r.cfg.ReportTTL {
			rep = MasterReport{} // its master is gone
		}
		slots := r.cfg.DefaultSlotsPerNode
		if rep.SlotsPerNode > 0 {
			slots = rep.SlotsPerNode
		}
		plans[i] = SitePlan{Name: n, Alive: views[i].Alive, Relative: rel[n], Running: max(in.Outstanding[n], 0),
			SlotsPerNode: slots, Agent: s.agent, Master: rep, Yield: s.yield, Busy: r.busy(s, in.Now),
			AgentAt: s.agentAt, MasterAt: s.masterAt}
	}
	weights := Weights(views, r.cfg)
	maxW := 0.0
	for i := range plans {
		plans[i].Weight = weights[i]
		maxW = math.Max(maxW, weights[i])
	}

	// The global cap: the pilots of silent sites still count against it;
	// the rest is split among the live sites by weight, up to what each
	// could hold. A live site whose part is 0 may hold no pilot.
	if in.GlobalMax > 0 {
		left := in.GlobalMax
		claims := make([]Claim, len(plans))
		for i, p := range plans {
			if !p.Alive {
				left -= max(p.Agent.Held, 0)
				continue
			}
			room := max(p.Agent.Held, 0) + max(p.Agent.Idle, 0)
			if m := in.SiteMax[p.Name]; m > 0 {
				room = min(room, m)
			}
			claims[i] = Claim{Weight: p.Weight, Room: room}
		}
		for i, n := range Split(max(left, 0), claims) {
			if plans[i].Alive {
				plans[i].MaxNodes = n
				plans[i].NoPilots = n == 0
			}
		}
	}

	// The pending tasks, by weight, each site up to the tasks it could
	// start now: free slots of its pilots and of the idle nodes it may take.
	claims := make([]Claim, len(plans))
	for i, p := range plans {
		s := r.sites[p.Name]
		room := -1
		if !s.agentAt.IsZero() {
			nodes := max(s.agent.Held, 0) + max(s.agent.Idle, 0)
			for _, m := range []int{in.SiteMax[p.Name], p.MaxNodes} {
				if m > 0 {
					nodes = min(nodes, m)
				}
			}
			room = max(0, nodes*p.SlotsPerNode-p.Running)
		}
		w := p.Weight
		if p.NoPilots {
			w = 0
		}
		claims[i] = Claim{Weight: w, Room: room}
	}
	for i, n := range Split(in.Pending, claims) {
		plans[i].Share = n
	}

	for i := range plans {
		p := &plans[i]
		p.Allowance = -1
		if live > 1 || !p.Alive {
			p.Allowance = Allowance(p.Master.Slots, p.Weight, maxW, r.cfg)
		}
		p.MaxNodes = lower(p.MaxNodes, in.SiteMax[p.Name])
		p.MaxNodes = lower(p.MaxNodes, p.Master.Cap)
		p.Recommended = p.Master.MinNodes
		if p.MaxNodes > 0 {
			p.Recommended = min(p.Recommended, p.MaxNodes)
		}
		if p.NoPilots {
			p.MaxNodes, p.Recommended = 0, 0
		}
	}
	return plans
}

// busy lists the pilots seen within PilotTTL, forgetting older ones.
func (r *Registry) busy(s *site, now time.Time) map[string]bool {
	out := make(map[string]bool, len(s.pilots))
	for id, p := range r.pilotStatus(s, now) {
		out[id] = p.Busy
	}
	return out
}

// PilotStatus returns the pilots of a site's pool seen within PilotTTL.
func (r *Registry) PilotStatus(name string, now time.Time) map[string]pilotproto.PilotStatus {
	s := r.sites[name]
	if s == nil {
		return map[string]pilotproto.PilotStatus{}
	}
	return r.pilotStatus(s, now)
}

func (r *Registry) pilotStatus(s *site, now time.Time) map[string]pilotproto.PilotStatus {
	out := make(map[string]pilotproto.PilotStatus, len(s.pilots))
	for id, p := range s.pilots {
		if now.Sub(p.at) > r.cfg.PilotTTL {
			delete(s.pilots, id)
			continue
		}
		out[id] = p.status
	}
	return out
}

// lower is the smaller of two caps, 0 meaning none.
func lower(a, b int) int {
	if b > 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// Report returns a site master's latest report and when it came, if it is
// fresher than ReportTTL.
func (r *Registry) Report(name string, now time.Time) (MasterReport, time.Time, bool) {
	s := r.sites[name]
	if s == nil || s.reportAt.IsZero() || now.Sub(s.reportAt) > r.cfg.ReportTTL {
		return MasterReport{}, time.Time{}, false
	}
	return s.master, s.reportAt, true
}

// Allowance returns how many tasks a site's pool may hold, and false when
// it may hold any number (it is the only live site).
func (r *Registry) Allowance(name string, now time.Time) (int, bool) {
	names := make([]string, 0, len(r.sites))
	for n := range r.sites {
		names = append(names, n)
	}
	sort.Strings(names)
	views := make([]Site, len(names))
	me, live := -1, 0
	for i, n := range names {
		views[i] = Site{Name: n, Alive: r.alive(r.sites[n], now)}
		if views[i].Alive {
			live++
		}
		if n == name {
			me = i
		}
	}
	if me < 0 {
		return 0, true
	}
	if live <= 1 && views[me].Alive {
		return 0, false
	}
	// The relative turnarounds walk every job's cells: only when several
	// sites share the work (this runs at every pull).
	rel := r.tracker.Relative()
	for i := range views {
		views[i].Relative = rel[views[i].Name]
	}
	w := Weights(views, r.cfg)
	maxW := 0.0
	for _, x := range w {
		maxW = math.Max(maxW, x)
	}
	slots := 0
	if rep, _, ok := r.Report(name, now); ok {
		slots = rep.Slots
	}
	return Allowance(slots, w[me], maxW, r.cfg), true
}
