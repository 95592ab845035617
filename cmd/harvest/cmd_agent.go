package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/internal/statelock"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
	"gopkg.in/yaml.v3"
)

// agentFlags are the agent's settings. Every flag can also be set by a
// HARVEST_* environment variable and by the same key in the YAML file
// given with --config (flags win over the environment, which wins over
// the file).
func agentFlags() []cli.Flag {
	// Defaults come from agent.DefaultConfig, the one source of truth.
	def := agent.DefaultConfig()
	secs := func(s int64) time.Duration { return time.Duration(s) * time.Second }
	limit := func(l cluster.Limit) time.Duration { // unlimited reads as 0
		if l.IsUnlimited() {
			return 0
		}
		return secs(int64(l))
	}
	own := []cli.Flag{
		&cli.StringFlag{Name: "config", EnvVars: []string{"HARVEST_CONFIG"}, Usage: "read settings from this YAML `FILE` (keys are the flag names)"},
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "poll", Value: def.PollInterval, EnvVars: []string{"HARVEST_POLL"}, Usage: "time between rounds"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "event-check", Value: def.EventCheck, EnvVars: []string{"HARVEST_EVENT_CHECK"}, Usage: "between rounds, how often to ask the batch system's job-event count (SLURM: one sdiag, which lists no jobs); a job submitted, ended or cancelled starts a round at once (0 = off; see docs/policy.md)"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "fast-poll", Value: def.FastPoll, EnvVars: []string{"HARVEST_FAST_POLL"}, Usage: "time between rounds while pilots hold nodes a waiting job could start on once one running job ends (0 = always --poll; see docs/policy.md)"}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "min-nodes", Value: def.Policy.MinNodes, EnvVars: []string{"HARVEST_MIN_NODES"}, Usage: "nodes the harvest keeps even when others wait (the admin's floor of MiniNode)"}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "max-nodes", Value: def.Policy.MaxNodes, EnvVars: []string{"HARVEST_MAX_NODES"}, Usage: "most pilots held at once (0 = no cap)"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "mini-time", Value: secs(def.Policy.MiniTime), EnvVars: []string{"HARVEST_MINI_TIME"}, Usage: "if a job ends within this, wait a round instead of acting"}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "idle-margin", Value: def.Policy.IdleMargin, EnvVars: []string{"HARVEST_IDLE_MARGIN"}, Usage: "idle nodes left free while a foreign job waits, when polling, so that a job that arrives starts at once (0 = off; see docs/policy.md)"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "margin", Value: secs(def.Policy.Margin), EnvVars: []string{"HARVEST_MARGIN"}, Usage: "safety margin subtracted from pilot time limits"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "max-pilot-time", Value: limit(def.Policy.MaxPilotLimit), EnvVars: []string{"HARVEST_MAX_PILOT_TIME"}, Usage: "cap on a pilot's time limit (0 = the partition's MaxTime)"}),
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "harvest-while-idle", Value: def.Policy.HarvestWhileIdle, EnvVars: []string{"HARVEST_WHILE_IDLE"}, Usage: "keep pilots on idle nodes even with an empty backlog"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "give-back", Value: "auto", EnvVars: []string{"HARVEST_GIVE_BACK"}, Usage: "how pilots make way for foreign jobs: preemption (pilots above --min-nodes in the batch system's preemptible partition: no delay), polling (the agent cancels them: up to one poll), or auto (preemption where the adapter finds a usable preemptible partition)"}),
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "shrink", Value: def.Policy.Shrink, EnvVars: []string{"HARVEST_SHRINK"}, Usage: "pull in the end of pilots the top pending job will need, rather than cancel them when it can start"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "min-pilot-time", Value: limit(def.Policy.MinPilotLimit), EnvVars: []string{"HARVEST_MIN_PILOT_TIME"}, Usage: "smallest useful pilot: the batch system may shorten pilots down to it to fit its plan (SLURM >= 25.11 --time-min; ignored with a warning elsewhere)"}),
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "keep-recommended", Value: def.Policy.KeepRecommended, EnvVars: []string{"HARVEST_KEEP_RECOMMENDED"}, Usage: "let the master's MiniNode recommendation keep pilots a waiting job could use (by default only --min-nodes does)"}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "backlog", Value: -1, EnvVars: []string{"HARVEST_BACKLOG"}, Usage: "use a fixed backlog of N pending tasks (testing; -1 = unlimited backlog, i.e. harvest every hole)"}),
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "dry-run", Value: def.DryRun, EnvVars: []string{"HARVEST_DRY_RUN"}, Usage: "log decisions without submitting or cancelling anything"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "dump-snapshots", Value: def.DumpDir, EnvVars: []string{"HARVEST_DUMP_SNAPSHOTS"}, Usage: "write every snapshot decided on (and its decision) to `DIR`, for `harvest decide`"}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "dump-keep", Value: def.DumpKeep, EnvVars: []string{"HARVEST_DUMP_KEEP"}, Usage: "keep at most this many dumped snapshots"}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "max-submit-per-round", Value: def.MaxSubmitPerRound, EnvVars: []string{"HARVEST_MAX_SUBMIT_PER_ROUND"}, Usage: "most pilots submitted in one round; the rest follow in the next rounds (0 = no bound)"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "snapshot-timeout", Value: def.SnapshotTimeout, EnvVars: []string{"HARVEST_SNAPSHOT_TIMEOUT"}, Usage: "most one snapshot may take, the adapter's commands and parsing together (at most 1h; raise it with the adapter's own timeout option on a very large cluster)"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "submit-timeout", Value: def.SubmitTimeout, EnvVars: []string{"HARVEST_SUBMIT_TIMEOUT"}, Usage: "first submit timeout; grows by this much after each timeout, resets on success"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "pilot-command", Value: strings.Join(def.PilotCommand, " "), EnvVars: []string{"HARVEST_PILOT_COMMAND"}, Usage: "command every pilot job runs (split on spaces, no shell)"}),
		altsrc.NewStringSliceFlag(&cli.StringSliceFlag{Name: "pilot-env", EnvVars: []string{"HARVEST_PILOT_ENV"}, Usage: "`KEY=VALUE` added to the pilots' environment (repeatable)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "pilot-workdir", Value: def.PilotWorkDir, EnvVars: []string{"HARVEST_PILOT_WORKDIR"}, Usage: "pilots' working directory (shared file system)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "pilot-output", Value: def.PilotOutput, EnvVars: []string{"HARVEST_PILOT_OUTPUT"}, Usage: "pilots' stdout/stderr path pattern, in the batch system's syntax"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"HARVEST_LOG_LEVEL"}, Usage: "debug, info, warn or error"}),
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "log-json", EnvVars: []string{"HARVEST_LOG_JSON"}, Usage: "log as JSON lines"}),
	}
	own = append(own, queueFlags()...)
	own = append(own, opsFlags()...)
	for _, f := range adapterFlags() {
		switch f := f.(type) {
		case *cli.StringFlag:
			own = append(own, altsrc.NewStringFlag(f))
		case *cli.StringSliceFlag:
			own = append(own, altsrc.NewStringSliceFlag(f))
		case *cli.BoolFlag:
			own = append(own, altsrc.NewBoolFlag(f))
		default:
			own = append(own, f)
		}
	}
	return own
}

func agentCommand() *cli.Command {
	flags := agentFlags()
	return &cli.Command{
		Name:  "agent",
		Usage: "run the harvest agent on the head node: poll the batch system, submit and cancel pilots",
		Description: "Each round the agent takes a snapshot of the cluster through the adapter, decides with the\n" +
			"backfill-aware policy (see `harvest decide`) and submits one-node pilots sized to end before the\n" +
			"job at the head of the queue could start, or cancels pilots the moment a waiting job could use\n" +
			"their nodes. It never cancels because a snapshot failed; while the batch system is unreachable it\n" +
			"backs off. SIGTERM or SIGINT stop it gracefully (pilots are left running).",
		Flags:  flags,
		Before: withConfigFile(flags, "config"),
		Action: runAgent,
	}
}

// withConfigFile applies the YAML file named by flag, if any, to flags;
// its errors name the file.
func withConfigFile(flags []cli.Flag, flag string) cli.BeforeFunc {
	load := configSource(flags, flag)
	return func(c *cli.Context) error {
		src, err := load(c)
		if err != nil {
			return err
		}
		err = altsrc.ApplyInputSourceValues(c, src, flags)
		if err != nil && c.String(flag) != "" && !strings.Contains(err.Error(), c.String(flag)) {
			return fmt.Errorf("config file %s: %w", c.String(flag), err)
		}
		return err
	}
}

// configSource loads the YAML file named by flag, if any: a mapping whose
// keys are names of flags (a misspelt key was ignored, and the agent ran
// without the setting).
func configSource(flags []cli.Flag, flag string) func(*cli.Context) (altsrc.InputSourceContext, error) {
	return func(c *cli.Context) (altsrc.InputSourceContext, error) {
		if c.String(flag) == "" {
			return &altsrc.MapInputSource{}, nil
		}
		b, err := os.ReadFile(c.String(flag))
		if err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		var keys map[string]any
		if err := yaml.Unmarshal(b, &keys); err != nil {
			return nil, fmt.Errorf("config file %s is not a mapping of settings (keys are the flag names): %v", c.String(flag), err)
		}
		known := map[string]bool{}
		for _, f := range flags {
			for _, n := range f.Names() {
				known[n] = true
			}
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			if !known[k] {
				return nil, fmt.Errorf("config file %s: unknown key %q (keys are the flag names of `harvest agent --help`, without the dashes)", c.String(flag), k)
			}
		}
		src, err := altsrc.NewYamlSourceFromFile(c.String(flag))
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", c.String(flag), err)
		}
		return src, nil
	}
}

// agentConfig maps the flags onto agent.Config and validates it.
func agentConfig(c *cli.Context) (agent.Config, error) {
	cfg := agent.DefaultConfig()
	if err := checkAdminFlags(c); err != nil {
		return cfg, err
	}
	cfg.PollInterval = c.Duration("poll")
	cfg.FastPoll = c.Duration("fast-poll")
	cfg.EventCheck = c.Duration("event-check")
	if cfg.MaxBackoff < cfg.PollInterval {
		cfg.MaxBackoff = 12 * cfg.PollInterval
	}
	p := &cfg.Policy
	p.MinNodes = c.Int("min-nodes")
	p.MaxNodes = c.Int("max-nodes")
	p.MiniTime = int64(c.Duration("mini-time") / time.Second)
	p.Margin = int64(c.Duration("margin") / time.Second)
	p.IdleMargin = c.Int("idle-margin")
	if d := c.Duration("max-pilot-time"); d > 0 {
		p.MaxPilotLimit = cluster.Limit(d / time.Second)
	}
	p.HarvestWhileIdle = c.Bool("harvest-while-idle")
	p.KeepRecommended = c.Bool("keep-recommended")
	cfg.DryRun = c.Bool("dry-run")
	cfg.DumpDir = c.String("dump-snapshots")
	cfg.DumpKeep = c.Int("dump-keep")
	cfg.MaxSubmitPerRound = c.Int("max-submit-per-round")
	cfg.SnapshotTimeout = c.Duration("snapshot-timeout")
	cfg.SubmitTimeout = c.Duration("submit-timeout")
	cfg.SubmitTimeoutStep = c.Duration("submit-timeout")
	cfg.PilotCommand = strings.Fields(c.String("pilot-command"))
	for _, kv := range c.StringSlice("pilot-env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return cfg, fmt.Errorf("--pilot-env %q: want KEY=VALUE", kv)
		}
		if cfg.PilotEnv == nil {
			cfg.PilotEnv = map[string]string{}
		}
		cfg.PilotEnv[k] = v
	}
	cfg.PilotWorkDir = c.String("pilot-workdir")
	cfg.PilotOutput = c.String("pilot-output")
	if cfg.DumpDir != "" {
		// The agent (root, often) creates files there by name: in a
		// directory another user controls, a link they put in place of
		// one would have it overwrite any file.
		if err := safefs.SharedDir(cfg.DumpDir); err != nil {
			return cfg, fmt.Errorf("--dump-snapshots: %w", err)
		}
	}
	return cfg, cfg.Validate()
}

func runAgent(c *cli.Context) error {
	limitDaemonMemory()
	paceCollector()
	log := newLogger(c.App.ErrWriter, c.String("log-level"), c.Bool("log-json"))
	cfg, err := agentConfig(c)
	if err != nil {
		return cli.Exit("harvest agent: invalid configuration: "+err.Error(), 2)
	}
	switch {
	case c.String("queue") != "":
		if err := checkRemoteFlags(c); err != nil {
			return cli.Exit("harvest agent: "+err.Error(), 2)
		}
	case !c.Bool("no-queue"):
		if c.IsSet("backlog") {
			return cli.Exit("harvest agent: --backlog replaces the queue's demand; use it with --no-queue", 2)
		}
		if err := checkQueueFlags(c); err != nil {
			return cli.Exit("harvest agent: queue: "+err.Error(), 2)
		}
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// One agent per state directory (its queue, control file and tokens),
	// taken before anything is opened or submitted.
	if err := safefs.PrivateDir(c.String("state-dir")); err != nil {
		return cli.Exit("harvest agent: --state-dir: "+err.Error(), 1)
	}
	lock, err := statelock.Acquire(c.String("state-dir"))
	if err != nil {
		return cli.Exit("harvest agent: "+err.Error(), 1)
	}
	defer lock.Release()

	ad, closeAdapter, err := openAdapter(c, log)
	if err != nil {
		return cli.Exit("harvest agent: "+err.Error(), 1)
	}
	defer closeAdapter()

	// The hosted queue starts first, before the batch system is asked
	// anything: users submit and look at their jobs while slurmctld is
	// down, and the status page says since when it is.
	queueDone := make(chan error, 1)
	var hq *hostedQueue
	var q *queue.Queue
	shared := c.String("shared-dir")
	if shared == "" {
		shared = c.String("state-dir")
	}
	if c.String("queue") == "" && !c.Bool("no-queue") {
		h, err := openQueue(c, log)
		if err != nil {
			return cli.Exit("harvest agent: queue: "+err.Error(), 1)
		}
		defer h.close()
		if err := h.seedNodeLimits(ctx, c); err != nil {
			return cli.Exit("harvest agent: queue: "+err.Error(), 2)
		}
		hq, q = h, h.q
	}
	ops, err := newAgentOps(c, q, log)
	if err != nil {
		return cli.Exit("harvest agent: "+err.Error(), 2)
	}
	var sw swapHandler
	if hq != nil {
		handler, err := ops.handler(c, hq, noRounds{}, c.String("adapter"), "not known until the batch system answers", log)
		if err != nil {
			return cli.Exit("harvest agent: "+err.Error(), 1)
		}
		sw.set(handler)
		go func() {
			queueDone <- hq.serveWith(ctx, &sw)
			stop() // without the queue pilots cannot work
		}()
		log.Info("queue started", "advertise", hq.advertise, "socket", c.String("socket"), "state_dir", c.String("state-dir"))
		if hq.advertise == "" {
			log.Warn("the queue has no TCP listener (--listen): pilots on compute nodes cannot reach it")
		}
	}
	info, err := agent.WaitForAdapter(ctx, ad, cfg, ops.metrics.Health, log)
	if err != nil {
		return agentStopped(ctx, queueDone, log)
	}
	if info.TimeGranularity > 0 {
		cfg.Policy.Granularity = info.TimeGranularity
	}
	gb, err := agent.ChooseGiveBack(info, agent.GiveBackRequest{
		Mode: agent.GiveBackMode(c.String("give-back")), Shrink: c.Bool("shrink"),
		MinPilotLimit: cluster.Limit(c.Duration("min-pilot-time") / time.Second),
	})
	if err != nil {
		return cli.Exit("harvest agent: "+err.Error(), 2)
	}
	gb.Apply(&cfg.Policy)
	cfg.SubmitsVisible = info.SubmitsVisible
	for _, w := range gb.Warnings {
		log.Warn(w)
	}

	var src agent.DemandSource = agent.StaticDemand{}
	if n := c.Int("backlog"); n >= 0 {
		src = agent.StaticDemand{Info: agent.DemandInfo{Demand: &cluster.Demand{PendingTasks: n, SlotsPerNode: 1}}}
	}
	switch {
	case c.String("queue") != "":
		rq, err := openRemoteQueue(ctx, c, info)
		if err != nil {
			return cli.Exit("harvest agent: "+err.Error(), 1)
		}
		src = agent.SiteDemand{Round: rq.cl.AgentRound, End: rq.cl.AgentEnd}
		// The queue's allowed roots, as the hosting agent passes them.
		admin := map[string]string{"HARVEST_TASK_ROOTS": strings.Join(rq.roots, ",")}
		for k, v := range cfg.PilotEnv {
			admin[k] = v
		}
		cfg.PilotEnv = pilotEnv(rq.pilotURL, rq.pilotToken, shared, rq.site, admin)
		log.Info("using a remote queue", "queue", c.String("queue"), "site", rq.site, "pilot_queue", rq.pilotURL)
	case hq != nil:
		site := hq.q.LocalSite()
		src = agent.SiteDemand{
			Round: func(ctx context.Context, r api.AgentRound) (api.AgentPlan, error) {
				return hq.q.AgentRound(ctx, site, r)
			},
			End: func(_ context.Context, e api.PilotEnd) error { return hq.q.Pool(site).PullIn(e.Pilot, e.End) },
		}
		// Tasks read the allowed roots, and their inputs must resolve there
		// (the admin's --pilot-env may say otherwise).
		admin := map[string]string{"HARVEST_TASK_ROOTS": strings.Join(c.StringSlice("allowed-root"), ",")}
		for k, v := range cfg.PilotEnv {
			admin[k] = v
		}
		cfg.PilotEnv = pilotEnv(hq.pilotQueue(), hq.token, shared, site, admin)
	}
	ad = ops.metrics.InstrumentAdapter(ad)
	r := agent.NewReconciler(ad, ops.ctl.Demand(src), cfg, log)
	r.OnRound = ops.hook
	if hq != nil && c.String("queue") == "" {
		r.Wake = hq.q.PlanMoved() // the master's new cap acts at once
	}
	r.Health = ops.metrics.Health
	if hq != nil {
		handler, err := ops.handler(c, hq, r, info.Name, gb.Describe, log)
		if err != nil {
			return cli.Exit("harvest agent: "+err.Error(), 1)
		}
		sw.set(handler)
	}
	log.Info("agent started", "adapter", info.Name, "version", info.Version, "tag", info.Tag,
		"poll", cfg.PollInterval, "min_nodes", cfg.Policy.MinNodes, "max_nodes", cfg.Policy.MaxNodes,
		"dry_run", cfg.DryRun, "harvest_while_idle", cfg.Policy.HarvestWhileIdle,
		"give_back", gb.Mode, "give_back_detail", gb.Describe)
	runErr := make(chan error, 1)
	go func() { runErr <- r.Run(ctx) }()
	select {
	case err = <-runErr:
	case err = <-queueDone:
		// The queue stopped on its own: without it pilots cannot work.
		stop()
		<-runErr
		if err != nil {
			err = cli.Exit("harvest agent: queue: "+err.Error(), 1)
		}
	}
	log.Info("agent stopped", "reason", context.Cause(ctx))
	return err
}

// agentStopped ends an agent stopped before the batch system answered: by
// a signal (exit 0), or because its queue stopped (its error).
func agentStopped(ctx context.Context, queueDone chan error, log *slog.Logger) error {
	log.Info("agent stopped before the batch system answered", "reason", context.Cause(ctx))
	select {
	case err := <-queueDone:
		if err != nil {
			return cli.Exit("harvest agent: queue: "+err.Error(), 1)
		}
	default:
	}
	return nil
}

// swapHandler serves the agent's endpoints: the queue alone with an empty
// status page while the batch system has not answered yet, then
// everything.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// noRounds is the status page's round source before the reconciler exists.
type noRounds struct{}

func (noRounds) Last() (agent.RoundResult, bool) { return agent.RoundResult{}, false }
