package replay

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	simcluster "github.com/harvest-hpc/harvest/adapters/sim"
	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/sim"
)

// Config is one replay: the mapping, the runs, and how to run them.
type Config struct {
	Map  MapConfig
	Runs []Kind
	Run  RunConfig
	// ShiftThreshold is what counts as a job started later or earlier
	// than in the baseline (seconds of replay time).
	ShiftThreshold int64
	// SimLatency and SimReservations configure the simulator run on the
	// same scaled window (see docs/sim.md for why these values). A
	// negative SimLatency gives each run's simulation the scheduler's
	// reaction measured in that run, event by event (Reaction).
	SimLatency, SimReservations int64
}

// Report is a replay's outcome: `harvest replay --json`.
type Report struct {
	Plan struct {
		Jobs        int            `json:"jobs"`
		Skipped     map[string]int `json:"skipped,omitempty"`
		OfferedLoad float64        `json:"offered_load"`
		Nodes       int            `json:"nodes"`
		TraceNodes  int            `json:"trace_nodes"`
		// TraceNodesFrom says where TraceNodes comes from (the header,
		// --trace-nodes, or the widest job when the header is silent).
		TraceNodesFrom string  `json:"trace_nodes_from"`
		Scale          float64 `json:"scale"`
		From           int64   `json:"from_s"`
		To             int64   `json:"to_s"`
		// SpanS is the measured span in replay seconds: the window, or
		// longer while every harvest run still harvested (measuredSpan).
		SpanS int64 `json:"span_s"`
	} `json:"plan"`
	Runs []RunReport `json:"runs"`
	// NoiseFloor compares the second baseline run with the first.
	NoiseFloor *Shift `json:"noise_floor,omitempty"`
	// Skipped names runs that could not be made, and why.
	Skipped map[string]string `json:"skipped_runs,omitempty"`
}

// RunReport is one run: what SLURM did, the shift of its foreign jobs
// against the first baseline run, and the simulator on the same window.
type RunReport struct {
	Kind       Kind       `json:"kind"`
	Result     sim.Result `json:"result"`
	Shift      *Shift     `json:"shift_vs_baseline,omitempty"`
	Sim        sim.Result `json:"sim"`
	Fidelity   Fidelity   `json:"fidelity"`
	Unfinished []string   `json:"unfinished,omitempty"`
	AgentLog   string     `json:"agent_log,omitempty"`
	// HarvestStopS is when the run cancelled its pilots (seconds from its
	// start; harvest runs): its simulation stops the harvest then too.
	HarvestStopS int64 `json:"harvest_stop_s,omitempty"`
	// LeadS is how long the harvest ran before the window opened (harvest
	// runs, RunConfig.Lead): its simulation starts the harvest as early.
	LeadS int64 `json:"lead_s,omitempty"`
	// T0 is the run's first second, from which its times count (the job
	// completion log and the agent's log are in wall-clock time).
	T0 time.Time `json:"t0"`
	// Reaction is SLURM's reaction in the run, read from its job
	// completion log, and the scheduler latency its simulation was given.
	Reaction Reaction `json:"reaction"`
}

// Replay maps the window of w, makes every run in turn on the cluster and
// the simulator's counterpart of each, and compares them. skip, if it
// returns a reason, leaves a run out (a preemption run on a cluster
// without a preemptible partition).
func Replay(ctx context.Context, w sim.Workload, cfg Config, skip func(Kind) string) (Report, error) {
	var rep Report
	p, err := Map(w, cfg.Map)
	if err != nil {
		return rep, err
	}
	rep.Plan.Jobs, rep.Plan.Skipped, rep.Plan.OfferedLoad = len(p.Jobs), p.Skipped, p.OfferedLoad(cfg.Map.Nodes)
	rep.Plan.Nodes, rep.Plan.TraceNodes, rep.Plan.TraceNodesFrom, rep.Plan.Scale = cfg.Map.Nodes, p.TraceNodes, p.TraceNodesFrom, cfg.Map.Scale
	rep.Plan.From, rep.Plan.To = cfg.Map.From, cfg.Map.To
	var outs []Outcome
	for _, k := range cfg.Runs {
		if why := skip(k); why != "" {
			if rep.Skipped == nil {
				rep.Skipped = map[string]string{}
			}
			rep.Skipped[string(k)] = why
			cfg.Run.logf("%s: skipped: %s", k, why)
			continue
		}
		o, err := Run(ctx, p, k, cfg.Run)
		if err != nil {
			return rep, fmt.Errorf("%s run: %w", k, err)
		}
		outs = append(outs, o)
	}
	span := measuredSpan(p, outs)
	rep.Plan.SpanS = span
	var base *sim.Result
	for _, o := range outs {
		rr := RunReport{Kind: o.Kind, Result: o.Result(p, cfg.Map.Nodes, span, cfg.Run.HarvestUser), Unfinished: o.Unfinished, AgentLog: o.AgentLog,
			HarvestStopS: o.HarvestStopS, LeadS: o.LeadS, T0: o.T0}
		starts, err := o.Starts()
		if err != nil {
			return rep, fmt.Errorf("%s run: %w", o.Kind, err)
		}
		rr.Reaction = MeasureReaction(starts)
		rr.Reaction.SimLatencyS = max(cfg.SimLatency, -1)
		var react *Reaction
		if cfg.SimLatency < 0 {
			react = &rr.Reaction
		}
		if rr.Sim, err = simulate(ctx, p, o.Kind, cfg, span, o.HarvestStopS, o.LeadS, react); err != nil {
			return rep, err
		}
		rr.Fidelity = CompareFidelity(rr.Sim, rr.Result)
		switch {
		case o.Kind == Baseline && base == nil:
			base = &rr.Result
		case base != nil:
			s := CompareShift(*base, rr.Result, cfg.ShiftThreshold)
			rr.Shift = &s
			if o.Kind == Baseline && rep.NoiseFloor == nil {
				rep.NoiseFloor = &s
			}
		}
		rep.Runs = append(rep.Runs, rr)
	}
	return rep, nil
}

// simulate runs `harvest sim` on the scaled window with the replay's
// settings: the same nodes, poll, margin, mini time and task length, in
// replay seconds; a harvest run's pilots are cancelled at stop (seconds;
// 0 = never), when the real run cancelled its own, and its harvest starts
// lead seconds before the window, when the real run started its own;
// with react, the scheduler's latency at each event is the real one's
// (Reaction.LatencyAt), else cfg.SimLatency.
func simulate(ctx context.Context, p Plan, k Kind, cfg Config, span, stop, lead int64, react *Reaction) (sim.Result, error) {
	if !k.Harvested() {
		lead = 0
	}
	// The simulator's clock starts at 0: the window moves by the lead,
	// and the result is moved back.
	sc := sim.DefaultConfig()
	sc.Mode, sc.Nodes, sc.From, sc.To = sim.Baseline, cfg.Map.Nodes, lead, span+lead
	sc.HarvestLead = lead
	if k.Harvested() {
		sc.Mode = sim.Harvest
		sc.HarvestBacklog = 1_000_000_000
		if k == Preemption {
			sc.GiveBack = sim.Preemption
		}
	}
	sc.TaskSeconds = max(1, int64(cfg.Run.TaskSeconds+0.5))
	sc.Poll = max(1, int64(cfg.Run.Poll/time.Second))
	sc.NoRecommend = false
	if k.Harvested() {
		// The real pilots run the master's capacity rule with its defaults
		// (it starts the pool at 4 pilots and doubles it while tasks keep
		// their speed): without it the simulator filled the cluster at
		// once, 97% against SLURM's 87% on KTH day 70. The master steps at
		// every queue heartbeat, the simulator at every poll.
		cc := capacity.DefaultConfig()
		cc.HoldRounds = max(1, int(time.Duration(cc.HoldRounds)*pilotHeartbeat/cfg.Run.Poll))
		sc.Capacity = &cc
		if stop > 0 && stop < span {
			// The real run cancelled its pilots when its own last foreign
			// job ended; the span runs to the last one of every run. Left
			// running, the simulated pilots counted up to 8 nodes the real
			// run no longer held (CI's window: 1.8 points in a run whose
			// span was 6 s longer than its own end).
			sc.HarvestStop = stop + lead
		}
	}
	sc.Cluster = simcluster.DefaultConfig()
	sc.Cluster.Latency = cfg.SimLatency
	if react != nil {
		// The real scheduler's reaction at the real event nearest the
		// simulated one: the simulation's events come within a second or
		// two of the real ones (it starts a job a second later where the
		// real scheduler took one), the window's events 7 s apart or more.
		sc.Cluster.Latency = 0
		sc.Cluster.LatencyAt = func(t int64) int64 { return react.LatencyAt(t-lead, reactionNear) }
	}
	sc.Cluster.Reservations = int(max(1, cfg.SimReservations))
	sc.Agent = agent.DefaultConfig()
	sc.Agent.Policy.MiniTime = int64(cfg.Run.MiniTime / time.Second)
	sc.Agent.Policy.Margin = int64(cfg.Run.Margin / time.Second)
	res, err := sim.Run(ctx, shift(p.Scaled, lead), sc)
	if err != nil {
		return res, fmt.Errorf("simulate the %s run: %w", k, err)
	}
	unshift(&res, lead)
	return res, nil
}

// shift returns w with every submit d seconds later.
func shift(w sim.Workload, d int64) sim.Workload {
	if d == 0 {
		return w
	}
	w.Jobs = slices.Clone(w.Jobs)
	for i := range w.Jobs {
		w.Jobs[i].Submit += d
	}
	return w
}

// unshift moves a simulation of a workload shifted by d back to the
// window's own times, as Outcome.Result gives the real run's: what
// happened in the lead says 0 in the records, and is before 0 in the
// node use (measured from 0 either way).
func unshift(res *sim.Result, d int64) {
	if d == 0 {
		return
	}
	back := func(t int64) int64 {
		if t < 0 {
			return t // never
		}
		return max(t-d, 0)
	}
	res.From -= d
	for i := range res.Records {
		r := &res.Records[i]
		r.Submit, r.Start, r.End = back(r.Submit), back(r.Start), back(r.End)
	}
	for i := range res.Usage {
		res.Usage[i].T -= d
	}
	for i := range res.Capacity {
		res.Capacity[i].T -= d
	}
	for i := range res.Harvest.Jobs {
		j := &res.Harvest.Jobs[i]
		j.SubmitS = back(j.SubmitS)
		if j.FinishS != nil {
			f := back(*j.FinishS)
			j.FinishS = &f
		}
	}
}

// reactionNear is how far, in seconds, a simulated event may be from a
// real one to take its reaction (Reaction.LatencyAt).
const reactionNear = 3

// pilotHeartbeat is the replay pilots' queue heartbeat (harvest pilot
// --heartbeat): the master's capacity rule steps at each.
const pilotHeartbeat = time.Second

// RunName names the i-th run of kind k for files: baseline, baseline-2...
func RunName(k Kind, i int) string {
	if i <= 1 {
		return string(k)
	}
	return string(k) + "-" + strconv.Itoa(i)
}

// measuredSpan is the one span of every run and simulation: the window,
// or longer while every harvest run still harvested. A harvest run
// cancels its pilots once its own last foreign job ended (HarvestStopS);
// past the first such stop, a run's idle nodes are the replay's doing,
// not its policy's, and its utilisation would fall by what another run
// took longer: a run whose foreign jobs all ended 7 s sooner lost 2.9
// points for it (an SDSC pair, 16 nodes, a 240 s span). Without harvest
// runs: until the last foreign job ended in any run.
func measuredSpan(p Plan, outs []Outcome) int64 {
	span, stop := p.SpanS, int64(-1)
	for _, o := range outs {
		if o.Kind.Harvested() && (stop < 0 || o.HarvestStopS < stop) {
			stop = o.HarvestStopS
		}
	}
	if stop >= 0 {
		return max(span, stop)
	}
	for _, o := range outs {
		for _, c := range o.Foreign {
			if c.Started() {
				span = max(span, int64(c.End.Sub(o.T0).Seconds())+1)
			}
		}
	}
	return span
}
