package web

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/svgchart"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
)

//go:embed templates/status.html
var templates embed.FS

var statusTmpl = template.Must(template.New("status.html").ParseFS(templates, "templates/status.html"))

// Page is what the status page shows; built by BuildPage (pure) and
// rendered by the template.
type Page struct {
	User, Role, Adapter string
	GiveBack            string
	Generated           string
	HaveRound           bool
	RoundAt, RoundAgo   string
	Nodes               Sample
	IdleNodes           int
	ForeignPending      int
	Paused              bool
	PausedSince         string
	Drain               *api.DrainState
	Decision            DecisionView
	Pilots              []PilotRow
	Jobs                []JobRow
	Users               []UserRow
	Chart               Chart
	Dashboard           *Dashboard // admins only
	Errors              []string
}

// Dashboard is what an admin asks first: did the harvest delay anybody,
// what work did give-back lose, and what does each site yield.
type Dashboard struct {
	DelayedNow    int    // foreign jobs waiting now for nodes pilots held
	LongestNow    string // the longest of those waits so far
	LongestNowJob string
	Delayed       int    // foreign jobs that started after such a wait
	TotalDelay    string // and their waits added up
	MaxDelay      string
	MaxDelayJob   string
	Unobserved    int
	LostWork      string // task time lost to pilots that ended under their tasks
	LostAttempts  int64  // interrupted attempts, all sites
	Sites         []SiteYield
}

// SiteYield is one site's yield row.
type SiteYield struct {
	Name                     string
	PilotHours, UsefulHours  string
	Yield                    string // "83%", or "-" before any pilot time
	Done, Failed, Interrupts int64
}

// DashboardInputs are the figures the dashboard is built from.
type DashboardInputs struct {
	Harm            agent.Harm
	LostTaskSeconds float64
	Sites           []api.Site
}

// BuildDashboard turns the figures into words. Pure.
func BuildDashboard(in DashboardInputs) *Dashboard {
	h := in.Harm
	d := &Dashboard{DelayedNow: len(h.Waiting), LongestNow: "-", Delayed: h.Started, TotalDelay: human(time.Duration(h.TotalDelay) * time.Second),
		MaxDelay: "-", Unobserved: h.Unobserved, LostWork: human(time.Duration(in.LostTaskSeconds * float64(time.Second)))}
	if len(h.Waiting) > 0 {
		d.LongestNow, d.LongestNowJob = human(time.Duration(max(h.Now-h.Waiting[0].Since, 0))*time.Second), h.Waiting[0].ID
	}
	if h.Started > 0 {
		d.MaxDelay, d.MaxDelayJob = human(time.Duration(h.MaxDelay)*time.Second), h.MaxDelayJob
	}
	for _, s := range in.Sites {
		row := SiteYield{Name: s.Name, PilotHours: fmt.Sprintf("%.2f", s.PilotHours), UsefulHours: fmt.Sprintf("%.2f", s.UsefulHours),
			Yield: "-", Done: s.Done, Failed: s.Failed, Interrupts: s.Interrupted}
		if y, ok := agent.Yield(s.UsefulHours, s.PilotHours); ok {
			row.Yield = fmt.Sprintf("%.0f%%", 100*y)
		}
		d.LostAttempts += s.Interrupted
		d.Sites = append(d.Sites, row)
	}
	return d
}

// DecisionView is the current decision in words.
type DecisionView struct {
	Case, Reason, Action, TopJob, MaxTime string
	MinNodes                              int
}

// PilotRow is one pilot job.
type PilotRow struct {
	ID, State, Node, Started, Deadline, Left string
	Confined                                 string // whether its tasks run confined, as its worker said
}

// JobRow is one harvest job with its progress.
type JobRow struct {
	ID                                    int64
	Owner, Name, State                    string
	Total, Done, Failed, Running, Waiting int
	Percent                               int
}

// UserRow is one user's fair-share standing.
type UserRow struct {
	Name                         string
	Priority                     float64
	Computed                     string
	OverQuota                    bool
	Running, MaxCores, Waiting   int
	CPU, MaxCPU, Cost, MaxCost   string
	CPUPercent, CostPercent, Use int
}

// Inputs are the figures BuildPage turns into a Page.
type Inputs struct {
	User, Role, Adapter string
	GiveBack            string
	Now                 time.Time
	Round               *agent.RoundResult
	Control             agent.ControlState
	Deadlines           map[string]int64  // pilot id -> deadline reported by the master (Unix s)
	Confinement         map[string]string // pilot id -> whether its tasks run confined
	Jobs                []api.Job
	Users               []api.User
	Samples             []Sample
	Window              time.Duration
	Errors              []string
}

func clock(t int64) string { return time.Unix(t, 0).UTC().Format("15:04:05") }

func human(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < 0:
		return "overdue"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func limitWords(l cluster.Limit) string {
	if l.IsUnlimited() {
		return "unlimited"
	}
	return human(time.Duration(l) * time.Second)
}

// BuildPage assembles the page. Pure: every figure comes from in.
func BuildPage(in Inputs) Page {
	p := Page{User: in.User, Role: in.Role, Adapter: in.Adapter, GiveBack: in.GiveBack, Generated: in.Now.UTC().Format("2006-01-02 15:04:05 UTC"), Errors: in.Errors}
	p.Paused, p.Drain = in.Control.Paused, in.Control.Drain
	if in.Control.PausedAt > 0 {
		p.PausedSince = time.Unix(in.Control.PausedAt, 0).UTC().Format("2006-01-02 15:04 UTC")
	}
	if r := in.Round; r != nil {
		s := r.Snapshot
		p.HaveRound = true
		p.RoundAt = clock(s.Now) + " UTC"
		p.Nodes = SampleOf(s)
		p.IdleNodes = s.IdleNodes
		d := r.Decision
		p.Decision = DecisionView{Case: string(d.Case), Reason: d.Reason, TopJob: d.TopJob, MinNodes: d.MinNodes, MaxTime: limitWords(d.MaxTime)}
		switch {
		case d.Submit != nil:
			p.Decision.Action = fmt.Sprintf("submit %d pilot(s), time limit %s", d.Submit.Count, limitWords(d.Submit.TimeLimit))
		case len(d.Release) > 0:
			p.Decision.Action = fmt.Sprintf("release %d pilot(s): %s", len(d.Release), strings.Join(d.Release, ", "))
		default:
			p.Decision.Action = "nothing"
		}
		for _, j := range s.Jobs {
			if !j.Pilot {
				if j.State == cluster.Pending {
					p.ForeignPending++
				}
				continue
			}
			p.Pilots = append(p.Pilots, pilotRow(j, s.Now, in.Deadlines, in.Confinement))
		}
	}
	for _, j := range in.Jobs {
		row := JobRow{ID: j.ID, Owner: j.Owner, Name: j.Name, State: j.State, Total: j.Tasks.Total, Done: j.Tasks.Done,
			Failed: j.Tasks.Failed, Running: j.Tasks.Running, Waiting: j.Tasks.Waiting}
		if j.Tasks.Total > 0 {
			row.Percent = 100 * (j.Tasks.Done + j.Tasks.Failed + j.Tasks.Killed) / j.Tasks.Total
		}
		p.Jobs = append(p.Jobs, row)
	}
	for _, u := range in.Users {
		row := UserRow{Name: u.Name, Priority: u.Priority, Running: u.RunningCores, MaxCores: u.MaxCores, Waiting: u.WaitingTasks,
			CPU: fmt.Sprintf("%.0f", u.CPUTime24h), MaxCPU: fmt.Sprintf("%.3g", u.MaxCPUTime),
			Cost: fmt.Sprintf("%.0f", u.Cost24h), MaxCost: fmt.Sprintf("%.3g", u.MaxCost)}
		row.Computed = fmt.Sprintf("%.3f", u.ComputedPriority)
		if u.ComputedPriority < 0 {
			row.Computed, row.OverQuota = "over quota", true
		}
		row.Use = percent(float64(u.RunningCores), float64(u.MaxCores))
		row.CPUPercent = percent(u.CPUTime24h, u.MaxCPUTime)
		row.CostPercent = percent(u.Cost24h, u.MaxCost)
		p.Users = append(p.Users, row)
	}
	end := in.Now.Unix()
	if p.HaveRound {
		end = in.Round.Snapshot.Now
	}
	p.Chart = BuildChart(in.Samples, end-int64(in.Window/time.Second), end, 720, 160)
	return p
}

func percent(v, limit float64) int {
	if limit <= 0 {
		return 0
	}
	return min(100, int(100*v/limit))
}

func pilotRow(j cluster.Job, now int64, deadlines map[string]int64, confinement map[string]string) PilotRow {
	row := PilotRow{ID: j.ID, Node: j.NodeList, Started: "-", Deadline: "-", Left: "-", Confined: "-"}
	if c := confinement[j.ID]; c != "" {
		row.Confined = c
	}
	switch {
	case j.State == cluster.Pending:
		row.State = "queued"
	case j.Busy:
		row.State = "busy"
	default:
		row.State = "idle"
	}
	if row.Node == "" {
		row.Node = "-"
	}
	if j.State == cluster.Running {
		start := now - j.RunTime
		if j.StartTime > 0 {
			start = j.StartTime
		}
		row.Started = clock(start)
		dl := int64(0)
		if !j.TimeLimit.IsUnlimited() {
			dl = start + int64(j.TimeLimit)
		}
		if d, ok := deadlines[j.ID]; ok && d > 0 {
			dl = d
		}
		if dl > 0 {
			row.Deadline = clock(dl)
			row.Left = human(time.Duration(dl-now) * time.Second)
		} else {
			row.Deadline, row.Left = "none (unlimited)", "-"
		}
	} else if !j.TimeLimit.IsUnlimited() {
		row.Left = "limit " + limitWords(j.TimeLimit)
	}
	return row
}

// Chart is the utilisation chart: the SVG and the shares it shows.
type Chart struct {
	SVG                            template.HTML
	W                              int
	From, To                       string
	Empty                          bool
	ForeignPct, UsefulPct, HeldPct int
	Hours                          string
}

// chartLayers are the chart's bands, bottom up; the page's legend uses
// the same colours.
var chartLayers = []svgchart.Layer{
	{Name: "foreign jobs", Color: "#8a9bb0"},
	{Name: "pilots running tasks", Color: "#3a8f3a"},
	{Name: "idle pilots", Color: "#cfe8b0"},
}

// BuildChart draws samples over [from, to] as three stacked step areas:
// foreign jobs at the bottom, pilots running tasks on top of them, and
// idle pilots above. Each sample holds until the next one (or to).
func BuildChart(samples []Sample, from, to int64, w, h int) Chart {
	// A history shorter than the window is drawn across the whole width.
	if len(samples) > 0 && samples[0].T > from {
		from = samples[0].T
		if to-from < 60 {
			from = to - 60
		}
	}
	c := Chart{W: w, From: clock(from), To: clock(to), Hours: human(time.Duration(to-from) * time.Second)}
	var in []Sample
	for i, s := range samples {
		if s.T > to {
			break
		}
		// Keep the last sample before from: it holds at from.
		if s.T < from && i+1 < len(samples) && samples[i+1].T <= from {
			continue
		}
		in = append(in, s)
	}
	if len(in) == 0 || to <= from {
		c.Empty = true
		return c
	}
	total := 0
	steps := make([]svgchart.Step, len(in))
	for i, s := range in {
		total = max(total, s.Total)
		steps[i] = svgchart.Step{T: s.T, Values: []float64{float64(s.Foreign), float64(s.Useful), float64(max(0, s.Held-s.Useful))}}
	}
	if total == 0 {
		c.Empty = true
		return c
	}
	sc := svgchart.Chart{Width: w, Height: h, From: from, To: to, Max: float64(total), Layers: chartLayers, Steps: steps,
		Attrs: [][2]string{{"id", "chart"}, {"role", "img"}, {"aria-label", "node utilisation over time"}, {"style", "background:#fff;border:1px solid #ccc"}}}
	if len(steps) > w {
		sc.Bins = w // one average per pixel column keeps the page small
	}
	c.SVG = template.HTML(sc.SVG()) // built from numbers and constants only
	// Time-weighted shares of the node-time shown.
	var span, fo, us, he float64
	for i, s := range in {
		end := to
		if i+1 < len(in) {
			end = in[i+1].T
		}
		dt := float64(end - max(s.T, from))
		if dt <= 0 {
			continue
		}
		span += dt * float64(s.Total)
		fo += dt * float64(s.Foreign)
		us += dt * float64(s.Useful)
		he += dt * float64(s.Held)
	}
	if span > 0 {
		c.ForeignPct, c.UsefulPct, c.HeldPct = int(100*fo/span+0.5), int(100*us/span+0.5), int(100*he/span+0.5)
	}
	return c
}

// status serves the page. A ?token= is checked, kept in an HttpOnly
// cookie and removed from the address by a redirect, so it does not stay
// in the browser's history or in proxies' logs more than once.
func (s *server) status(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" {
		_, role, err := s.cfg.Queue.AuthenticateToken(r, tok)
		if err != nil {
			s.denied(w, http.StatusUnauthorized, "The token in the address is not valid.")
			return
		}
		if role != api.RoleUser && role != api.RoleAdmin {
			// Refused before it is kept in a cookie, not after.
			s.denied(w, http.StatusForbidden, fmt.Sprintf("The status page needs a user or admin token; this is %s.", roleToken(role)))
			return
		}
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: api.PathStatus, HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: 7 * 24 * 3600})
		q := r.URL.Query()
		q.Del("token")
		u := url.URL{Path: api.PathStatus, RawQuery: q.Encode()}
		http.Redirect(w, r, u.String(), http.StatusSeeOther)
		return
	}
	name, role, err := s.caller(r, true)
	if err != nil {
		s.denied(w, api.StatusOf(api.CodeOf(err)), "Sign in with a token: open "+api.PathStatus+"?token=TOKEN (make one with `harvest token create`), or send it as Authorization: Bearer.")
		return
	}
	if role != api.RoleUser && role != api.RoleAdmin {
		// Say which token it is: an agent's token is not the pilot token.
		s.denied(w, http.StatusForbidden, fmt.Sprintf("The status page needs a user or admin token; this is %s.", roleToken(role)))
		return
	}
	in := Inputs{User: name, Role: role, Adapter: s.cfg.Adapter, GiveBack: s.cfg.GiveBack, Now: s.cfg.Now(), Control: s.cfg.Control.State(), Window: s.cfg.ChartWindow}
	if since, why, down := s.cfg.Metrics.Health.Unreachable(); down {
		in.Errors = append(in.Errors, fmt.Sprintf("batch system unreachable since %s: %s", since.UTC().Format("2006-01-02 15:04:05 UTC"), why))
	}
	if res, ok := s.cfg.Rounds.Last(); ok {
		in.Round = &res
	}
	in.Deadlines, in.Confinement = map[string]int64{}, map[string]string{}
	for id, st := range s.cfg.Queue.PilotStatus() {
		in.Deadlines[id] = st.Deadline
		in.Confinement[id] = st.Confinement
	}
	f := queue.ListFilter{Limit: 50}
	if role != api.RoleAdmin {
		f.Owner = name // users see their own jobs, as in the API
	}
	if jl, err := s.cfg.Queue.ListJobs(r.Context(), f); err != nil {
		in.Errors = append(in.Errors, "jobs: "+err.Error())
	} else {
		in.Jobs = jl.Jobs
	}
	if us, err := s.cfg.Queue.Users(r.Context()); err != nil {
		in.Errors = append(in.Errors, "users: "+err.Error())
	} else {
		sort.Slice(us, func(i, j int) bool { return us[i].ComputedPriority > us[j].ComputedPriority })
		in.Users = us
	}
	end := in.Now.Unix()
	if in.Round != nil {
		end = in.Round.Snapshot.Now
	}
	in.Samples = s.cfg.History.Since(end - int64(s.cfg.ChartWindow/time.Second) - 3600)
	p := BuildPage(in)
	if role == api.RoleAdmin {
		di := DashboardInputs{Harm: s.cfg.Metrics.Harm()}
		if st, err := s.cfg.Queue.Stats(r.Context()); err != nil {
			p.Errors = append(p.Errors, "work lost: "+err.Error())
		} else {
			di.LostTaskSeconds = st.LostTaskSeconds
		}
		if sl, err := s.cfg.Queue.Sites(r.Context()); err != nil {
			p.Errors = append(p.Errors, "sites: "+err.Error())
		} else {
			di.Sites = sl.Sites
		}
		p.Dashboard = BuildDashboard(di)
	}
	if in.Round != nil {
		// A simulated clock may run ahead of the wall clock: no "ago" then.
		if ago := s.cfg.Now().Sub(time.Unix(in.Round.Snapshot.Now, 0)); ago >= 0 {
			p.RoundAgo = human(ago)
		}
	}
	var buf bytes.Buffer
	if err := statusTmpl.Execute(&buf, p); err != nil {
		s.cfg.Log.Error("status page failed", "error", err)
		http.Error(w, "status page failed (see the agent's log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	w.Write(buf.Bytes())
}

func (s *server) denied(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html><title>harvest: sign in</title><h1>harvest status</h1><p>%s</p>\n", template.HTMLEscapeString(msg))
}

// roleToken names a token by its role, for a refusal.
func roleToken(role string) string {
	switch role {
	case api.RolePilot:
		return "the pilot token"
	case api.RoleAgent:
		return "an agent token (a site's agent uses it for the queue)"
	}
	return fmt.Sprintf("a token of role %q", role)
}
