package queue

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/siteshare"
	"github.com/harvest-hpc/harvest/queue/store"
)

// Several clusters (sites) share one queue: the site whose agent hosts it
// (LocalSite) and the sites whose agents reach it with an agent token. Each
// site's pilots form a pool with its own lease (Pool); the queue splits
// the work among the pools by siteshare's rules.

var siteNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

func validSiteName(name string) error {
	if !siteNameRE.MatchString(name) {
		return invalid("site name %q: want 1-63 of a-z 0-9 . _ - starting with a letter or digit", name)
	}
	return nil
}

// LocalSite is the name of the site whose agent hosts the queue.
func (q *Queue) LocalSite() string { return q.cfg.LocalSite }

// seen records a call from a site's master.
func (q *Queue) seen(site string) {
	q.mu.Lock()
	q.sites.Seen(site, q.now())
	q.mu.Unlock()
}

// observeLocked feeds applied results to the site's figures. q.mu must be
// held.
func (q *Queue) observeLocked(site string, outs []store.Outcome) {
	for _, o := range outs {
		var out siteshare.Outcome
		switch o.Status {
		case "done":
			out = siteshare.Done
		case "failed", "timeout":
			out = siteshare.Failed
		case "interrupted":
			out = siteshare.Interrupted
		default:
			continue // killed: the job was cancelled, not the site's doing
		}
		q.sites.Result(site, o.Job, float64(o.TurnaroundMS)/1000, float64(o.DurationMS)/1000, out)
	}
}

// pullRoom is how many of want tasks a pool may take now: all of them
// while it is the only live site, else what its allowance leaves beside
// the tasks it holds.
func (q *Queue) pullRoom(ctx context.Context, site string, want int) (int, error) {
	q.mu.Lock()
	allow, limited := q.sites.Allowance(site, q.now())
	q.mu.Unlock()
	if !limited {
		return want, nil
	}
	held, err := q.st.Outstanding(ctx)
	if err != nil {
		return 0, err
	}
	return max(0, min(want, allow-held[site])), nil
}

// siteSettings are the admin's settings of a site.
type siteSettings struct {
	min, max int
	paused   bool
}

// settings reads every site's settings (the local site's floor and cap
// are `harvest admin nodes`') and the global cap.
func (q *Queue) settings(ctx context.Context) (map[string]siteSettings, int, error) {
	out := map[string]siteSettings{}
	minN, maxN, global, err := q.st.NodeSettings(ctx)
	if err != nil {
		return nil, 0, err
	}
	out[q.cfg.LocalSite] = siteSettings{min: minN, max: maxN}
	sites, err := q.st.Sites(ctx)
	if err != nil {
		return nil, 0, err
	}
	for _, s := range sites {
		out[s.Name] = siteSettings{min: s.MinNodes, max: s.MaxNodes, paused: s.Paused}
	}
	return out, global, nil
}

// plan splits the work among the sites now.
func (q *Queue) plan(ctx context.Context) (map[string]siteshare.SitePlan, map[string]siteSettings, int, error) {
	sets, global, err := q.settings(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	q.mu.Lock()
	pending := q.deliverableLocked()
	q.mu.Unlock()
	held, err := q.st.Outstanding(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	in := siteshare.PlanInput{Now: q.now(), Pending: pending, Outstanding: held, GlobalMax: global, SiteMax: map[string]int{}}
	for name, s := range sets {
		in.Sites = append(in.Sites, name)
		in.SiteMax[name] = s.max
	}
	q.mu.Lock()
	plans := q.sites.Plan(in)
	q.mu.Unlock()
	out := make(map[string]siteshare.SitePlan, len(plans))
	for _, p := range plans {
		out[p.Name] = p
	}
	return out, sets, global, nil
}

// deliverableLocked is the demand the agents size pilots by: the waiting
// tasks a pull would hand out now, not every waiting task (issue 35 item
// 9). A user over a quota (CPU time, cost, cores) gets none; below it, a
// pull gives the user tasks, in hand-out order, while their running cores
// are under max_cores, so that many count. One user's million-task
// dataset under a 20-core quota asks for 20 cores of pilots, not the
// cluster.
func (q *Queue) deliverableLocked() int {
	total := 0
	for _, u := range q.users {
		if len(u.ready) == 0 || fairshare.OverQuota(u.limits, u.usage()) {
			continue
		}
		running := u.running
		for _, j := range u.ready {
			if running >= u.limits.MaxParallelJobs {
				break
			}
			cores := max(j.Cores, 1)
			n := min(j.Waiting, (u.limits.MaxParallelJobs-running+cores-1)/cores)
			total += n
			running += n * cores
		}
	}
	return total
}

// AgentRound records what a site's agent saw this round and returns the
// site's part of the work: its share of the waiting tasks as its backlog,
// its pool's busy pilots, its floor and caps.
func (q *Queue) AgentRound(ctx context.Context, site string, r api.AgentRound) (api.AgentPlan, error) {
	if r.Held < 0 || r.Idle < 0 || r.Held > 1_000_000 || r.Idle > 1_000_000 {
		return api.AgentPlan{}, invalid("held and idle must be 0..1000000")
	}
	now := q.now()
	q.mu.Lock()
	q.sites.Agent(site, siteshare.AgentReport{Held: r.Held, Idle: r.Idle}, now)
	q.mu.Unlock()
	if q.cfg.Shared { // for the other agents' plans (syncPeers)
		if err := q.st.PutSiteRound(ctx, site, store.SiteRound{Held: r.Held, Idle: r.Idle, AtMS: now.UnixMilli()}); err != nil {
			return api.AgentPlan{}, err
		}
	}
	plans, sets, _, err := q.plan(ctx)
	if err != nil {
		return api.AgentPlan{}, err
	}
	master, err := q.masterPilot(ctx, site)
	if err != nil {
		return api.AgentPlan{}, err
	}
	p, set := plans[site], sets[site]
	plan := api.AgentPlan{Site: site, PendingTasks: p.Share, RunningTasks: p.Running, SlotsPerNode: p.SlotsPerNode,
		Recommended: p.Recommended, Busy: p.Busy, Master: master, MinNodes: set.min, MaxNodes: p.MaxNodes,
		Paused: set.paused || p.NoPilots, Weight: p.Weight, Allowance: p.Allowance}
	if plan.MaxNodes > 0 {
		plan.MinNodes = min(plan.MinNodes, plan.MaxNodes)
	}
	return plan, nil
}

// RegisterAgent records the token a remote site's pilots will present
// (stored hashed; it replaces the site's previous one, so running pilots
// of an older token stop being served: drain before rotating it).
func (q *Queue) RegisterAgent(ctx context.Context, site string, r api.AgentRegistration) (api.AgentWelcome, error) {
	if len(r.PilotToken) < 32 || len(r.PilotToken) > 512 {
		return api.AgentWelcome{}, invalid("pilot_token must be 32..512 bytes")
	}
	if site == q.cfg.LocalSite {
		return api.AgentWelcome{}, invalid("site %s is the queue's own: its pilots use the queue's pilot token", site)
	}
	if len(r.Adapter) > 256 || len(r.Version) > 256 {
		return api.AgentWelcome{}, invalid("adapter and version must be at most 256 bytes")
	}
	if err := q.st.ReplaceToken(ctx, site, api.RolePilot, hashToken(r.PilotToken), q.now()); err != nil {
		return api.AgentWelcome{}, fmt.Errorf("store the pilot token: %w", err)
	}
	q.mu.Lock()
	q.sites.Agent(site, siteshare.AgentReport{}, q.now())
	q.mu.Unlock()
	q.log.Info("site agent registered", "site", site, "adapter", r.Adapter, "version", r.Version)
	return api.AgentWelcome{Site: site, LeaseTTLS: int64(q.cfg.LeaseTTL / time.Second), AllowedRoots: q.cfg.AllowedRoots}, nil
}

// AddSite registers a remote site and returns its agent token, shown once.
// Adding it again keeps its settings and replaces the token.
func (q *Queue) AddSite(ctx context.Context, name string) (api.SiteToken, error) {
	if err := validSiteName(name); err != nil {
		return api.SiteToken{}, err
	}
	if name == q.cfg.LocalSite {
		return api.SiteToken{}, invalid("site %s is the queue's own (its agent hosts the queue)", name)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return api.SiteToken{}, fmt.Errorf("token: %w", err)
	}
	tok := "hva_" + base64.RawURLEncoding.EncodeToString(b[:])
	if err := q.st.AddSite(ctx, name, hashToken(tok), api.RoleAgent, q.now()); err != nil {
		return api.SiteToken{}, fmt.Errorf("add site: %w", err)
	}
	q.log.Info("site added", "site", name)
	return api.SiteToken{Site: name, Token: tok}, nil
}

// SetSite changes a remote site's floor, cap or pause (the local site's
// floor and cap are `harvest admin nodes`', its pause `harvest admin
// pause`).
func (q *Queue) SetSite(ctx context.Context, name string, s api.SiteSettings) (api.Site, error) {
	if name == q.cfg.LocalSite {
		return api.Site{}, invalid("site %s is the queue's own: set its floor and cap with `harvest admin nodes`, pause it with `harvest admin pause`", name)
	}
	cur, ok, err := q.st.Site(ctx, name)
	if err != nil {
		return api.Site{}, err
	}
	if !ok {
		return api.Site{}, fmt.Errorf("%w: no site %s (add it with `harvest admin site add %s`)", api.ErrNotFound, name, name)
	}
	if s.MinNodes != nil {
		cur.MinNodes = *s.MinNodes
	}
	if s.MaxNodes != nil {
		cur.MaxNodes = *s.MaxNodes
	}
	if s.Paused != nil {
		cur.Paused = *s.Paused
	}
	switch {
	case cur.MinNodes < 0 || cur.MaxNodes < 0 || cur.MinNodes > api.MaxNodes || cur.MaxNodes > api.MaxNodes:
		return api.Site{}, invalid("min_nodes and max_nodes must not be negative nor exceed %d", api.MaxNodes)
	case cur.MaxNodes > 0 && cur.MinNodes > cur.MaxNodes:
		return api.Site{}, invalid("min_nodes %d exceeds max_nodes %d", cur.MinNodes, cur.MaxNodes)
	}
	if err := q.st.PutSite(ctx, cur); err != nil {
		return api.Site{}, err
	}
	l, err := q.Sites(ctx)
	if err != nil {
		return api.Site{}, err
	}
	for _, st := range l.Sites {
		if st.Name == name {
			return st, nil
		}
	}
	return api.Site{}, fmt.Errorf("%w: site %s", api.ErrNotFound, name)
}

// Sites lists every site with its figures: the local one, the registered
// ones and any other heard from.
func (q *Queue) Sites(ctx context.Context) (api.SiteList, error) {
	plans, sets, global, err := q.plan(ctx)
	if err != nil {
		return api.SiteList{}, err
	}
	leases, err := q.st.Leases(ctx)
	if err != nil {
		return api.SiteList{}, err
	}
	out := api.SiteList{GlobalMaxNodes: global}
	for _, name := range slices.Sorted(maps.Keys(plans)) {
		p, set := plans[name], sets[name]
		l := leases[name]
		st := api.Site{Name: name, Alive: p.Alive, AgentAt: unix(p.AgentAt), MasterAt: unix(p.MasterAt),
			RelativeTurnaround: p.Relative, Weight: p.Weight, Share: p.Share, Running: p.Running, Allowance: p.Allowance,
			Held: p.Agent.Held, Idle: p.Agent.Idle, MinNodes: set.min, MaxNodes: set.max, EffectiveMax: p.MaxNodes,
			Paused: set.paused || p.NoPilots, CapacityCap: p.Master.Cap, CapacityPhase: p.Master.Phase, Epoch: l.Epoch,
			PilotHours: p.Yield.PilotSeconds / 3600, UsefulHours: p.Yield.UsefulSeconds / 3600,
			Done: p.Yield.Done, Failed: p.Yield.Failed, Interrupted: p.Yield.Interrupted}
		if l.Alive(q.now()) {
			st.Master = l.Holder
		}
		out.Sites = append(out.Sites, st)
	}
	return out, nil
}

func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// registerLocalPilots stores the local site's pilot token (hashed) like a
// remote site's, on a database several agents serve: when this agent
// stops, its pilots go on through another agent, which knows them by it.
func (q *Queue) registerLocalPilots(ctx context.Context) error {
	if q.cfg.PilotToken == "" {
		return nil
	}
	if err := q.st.ReplaceToken(ctx, q.cfg.LocalSite, api.RolePilot, hashToken(q.cfg.PilotToken), q.now()); err != nil {
		return fmt.Errorf("store the local pilot token: %w", err)
	}
	return nil
}

// syncPeers brings into this agent's site figures what the other agents of
// a shared database heard: every site's latest agent round (stored by the
// agent that heard it) and, from the pools' leases, the masters alive. So
// each agent splits the work among all the sites, not only those that call
// it, and a site whose agent died stays alive while its master calls
// another agent; and the jobs cancelled lately, which the masters this
// agent serves must stop. Turnaround and yield stay each agent's own (the
// results it was sent).
func (q *Queue) syncPeers(ctx context.Context) error {
	if err := q.beatAgent(ctx); err != nil {
		return err
	}
	rounds, err := q.st.SiteRounds(ctx)
	if err != nil {
		return err
	}
	leases, err := q.st.Leases(ctx)
	if err != nil {
		return err
	}
	now := q.now()
	cancelled, err := q.st.CancelledSince(ctx, now.Add(-q.cfg.CancelNotice))
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.peerCancelled = cancelled
	for site, r := range rounds {
		at := time.UnixMilli(r.AtMS)
		if site == q.cfg.LocalSite || validSiteName(site) != nil || !at.After(q.peerRounds[site]) {
			continue // this agent's own, or nothing newer
		}
		q.peerRounds[site] = at
		q.sites.Agent(site, siteshare.AgentReport{Held: r.Held, Idle: r.Idle}, at)
	}
	for pool, l := range leases {
		if validSiteName(pool) == nil && l.Alive(now) {
			// The master renews every third of the TTL: it called then.
			q.sites.Seen(pool, l.Expires.Add(-q.cfg.LeaseTTL))
		}
	}
	return nil
}

// beatAgent renews this agent's liveness in the database for three
// rounds of syncPeers: once it lapses, the other agents take over the
// keyed submissions it left half stored.
func (q *Queue) beatAgent(ctx context.Context) error {
	return q.st.BeatAgent(ctx, q.now(), 3*q.cfg.ReconcileInterval)
}
