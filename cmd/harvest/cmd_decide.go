package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"time"

	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/jsonkeys"
	"github.com/urfave/cli/v2"
)

// decideExit is the exit code of every `harvest decide` error: bad flags,
// unreadable or invalid snapshot.
const decideExit = 2

func decideCommand() *cli.Command {
	// The flags' defaults are the agent's: one snapshot, one answer.
	def := agent.DefaultConfig().Policy
	secs := func(s int64) time.Duration { return time.Duration(s) * time.Second }
	return &cli.Command{
		Name:      "decide",
		Usage:     "replay one round of the scaling policy on a snapshot file and print the decision as JSON",
		UsageText: "harvest decide --snapshot FILE [--min-nodes N] [--max-nodes N] [--mini-time D] [--margin D] [--granularity D] [--idle-margin N] [--harvest-while-idle] [--upcoming FILE]",
		Description: "Reads a cluster snapshot (the JSON the agent dumps with --dump-snapshots, or one written by\n" +
			"hand; FILE \"-\" reads stdin), runs the same pure policy as `harvest agent`, and prints the\n" +
			"decision on stdout:\n\n" +
			"   {\"submit\": {\"count\": 5, \"time_limit_s\": 1020} | null, \"release\": [\"id\", ...], \"reason\": \"...\", \"case\": \"...\", ...}\n\n" +
			"Nothing is submitted or cancelled: this answers \"why did the agent do that\" and turns any\n" +
			"decision into a regression fixture. Flags override the snapshot's min_nodes and max_nodes;\n" +
			"a setting not given is harvest agent's default (polling, an idle margin of 1 included).\n" +
			"Durations take Go syntax (90s, 2m, 1h30m). Exit status 0 on success, 2 on any error.\n" +
			"See docs/policy.md.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "snapshot", Aliases: []string{"s"}, Usage: "snapshot `FILE` (\"-\" for stdin); required"},
			&cli.IntFlag{Name: "min-nodes", Usage: "admin floor of pilots `N`; overrides the snapshot's min_nodes"},
			&cli.IntFlag{Name: "max-nodes", Usage: "cap of pilots `N` (0 = no cap); overrides the snapshot's max_nodes"},
			&cli.StringFlag{Name: "context", Usage: "the agent's context `FILE` of a dumped round (*.context.json next to each dumped snapshot: its policy settings, ledger, the master's recommendation and the admin's pause or drain); flags given explicitly win"},
			&cli.StringFlag{Name: "upcoming", Usage: "ledger `FILE`: JSON array of pilots submitted but not in the snapshot yet, [{\"count\": N, \"time_limit_s\": S, \"submitted_at\": T}]"},
			&cli.IntFlag{Name: "recommended", Usage: "the master's MiniNode recommendation `N` (0 = none)"},
			&cli.DurationFlag{Name: "mini-time", Value: secs(def.MiniTime), Usage: "wait when a running job ends within `D`"},
			&cli.DurationFlag{Name: "margin", Value: secs(def.Margin), Usage: "pilots end `D` before the top pending job can start"},
			&cli.DurationFlag{Name: "granularity", Value: secs(def.Granularity), Usage: "the batch system's time-limit unit `D`; pilot limits are rounded down to it"},
			&cli.DurationFlag{Name: "max-pilot-limit", Usage: "cap on every pilot's time limit `D` (0 = only the partition's MaxTime)"},
			&cli.BoolFlag{Name: "harvest-while-idle", Usage: "keep pilots on idle nodes whatever the snapshot's demand"},
			&cli.BoolFlag{Name: "keep-recommended", Usage: "let the --recommended MiniNode keep pilots from release, as the admin's floor does"},
			&cli.IntFlag{Name: "idle-margin", Value: def.IdleMargin, Usage: "idle nodes `N` left free while a foreign job waits, when polling (0 = off; the default is harvest agent's, and --context carries a dumped round's)"},
			&cli.BoolFlag{Name: "ignore-expected-start", Usage: "do not use the batch system's expected start of the top pending job"},
		},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return cli.Exit("harvest decide: "+err.Error(), decideExit)
		},
		Action: runDecide,
	}
}

func runDecide(c *cli.Context) error {
	fail := func(err error) error { return cli.Exit("harvest decide: "+err.Error(), decideExit) }
	// Checked here, not with Required, so that it exits 2 like every other error.
	path := c.String("snapshot")
	if path == "" {
		return fail(errors.New("--snapshot FILE is required (\"-\" reads stdin)"))
	}
	if c.Args().Present() {
		return fail(fmt.Errorf("unexpected argument %q (the snapshot goes in --snapshot)", c.Args().First()))
	}
	var rc agent.RoundContext
	if f := c.String("context"); f != "" {
		var err error
		if rc, err = agent.ReadRoundContext(f); err != nil {
			return fail(err)
		}
	}
	cfg, err := decideConfig(c, rc.Config)
	if err != nil {
		return fail(err)
	}
	snap, err := readSnapshot(path, c.App.Reader)
	if err != nil {
		return fail(err)
	}
	if c.IsSet("min-nodes") {
		snap.MinNodes = c.Int("min-nodes")
	}
	if c.IsSet("max-nodes") {
		snap.MaxNodes = c.Int("max-nodes")
	}
	if err := snap.Validate(); err != nil {
		return fail(fmt.Errorf("%s: %w", displayName(path), err))
	}
	in := rc.Input(snap)
	if c.IsSet("recommended") {
		in.Recommended = c.Int("recommended")
	}
	if in.Recommended < 0 {
		return fail(fmt.Errorf("--recommended %d is negative", in.Recommended))
	}
	if f := c.String("upcoming"); f != "" {
		if in.Upcoming, err = readUpcoming(f); err != nil {
			return fail(err)
		}
	}
	d := policy.Decide(in, cfg)
	if d.Case == policy.CaseInvalidInput {
		return fail(errors.New(d.Reason))
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fail(err)
	}
	out = append(out, '\n')
	if _, err := c.App.Writer.Write(out); err != nil {
		return fail(err)
	}
	return nil
}

// decideConfig maps the flags onto policy.Config, starting from base (the
// defaults, or the settings a dumped round was decided with) and
// overriding only what is given.
func decideConfig(c *cli.Context, base *policy.Config) (policy.Config, error) {
	cfg := agent.DefaultConfig().Policy
	if err := checkAdminFlags(c); err != nil {
		return cfg, err
	}
	if base != nil {
		cfg = *base
	}
	secs := func(name string, cur int64) (int64, error) {
		if base != nil && !c.IsSet(name) {
			return cur, nil
		}
		d := c.Duration(name)
		if d%time.Second != 0 {
			return 0, fmt.Errorf("--%s %s is not a whole number of seconds", name, d)
		}
		return int64(d / time.Second), nil
	}
	var err error
	if cfg.MiniTime, err = secs("mini-time", cfg.MiniTime); err != nil {
		return cfg, err
	}
	if cfg.Margin, err = secs("margin", cfg.Margin); err != nil {
		return cfg, err
	}
	if cfg.Granularity, err = secs("granularity", cfg.Granularity); err != nil {
		return cfg, err
	}
	if base == nil || c.IsSet("max-pilot-limit") {
		capS, err := secs("max-pilot-limit", 0)
		if err != nil {
			return cfg, err
		}
		cfg.MaxPilotLimit = cluster.Unlimited
		if capS > 0 {
			cfg.MaxPilotLimit = cluster.Limit(capS)
		}
	}
	if c.IsSet("min-nodes") {
		cfg.MinNodes = c.Int("min-nodes")
	}
	if c.IsSet("max-nodes") {
		cfg.MaxNodes = c.Int("max-nodes")
	}
	if base == nil || c.IsSet("harvest-while-idle") {
		cfg.HarvestWhileIdle = c.Bool("harvest-while-idle")
	}
	if base == nil || c.IsSet("keep-recommended") {
		cfg.KeepRecommended = c.Bool("keep-recommended")
	}
	if base == nil || c.IsSet("idle-margin") {
		cfg.IdleMargin = c.Int("idle-margin")
	}
	if base == nil || c.IsSet("ignore-expected-start") {
		cfg.UseExpectedStart = !c.Bool("ignore-expected-start")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// readSnapshot reads one snapshot JSON object from path ("-" = stdin).
// Unknown fields are errors: a misspelt "min_node" must not be ignored.
func readSnapshot(path string, stdin io.Reader) (cluster.Snapshot, error) {
	var s cluster.Snapshot
	var b []byte
	var err error
	if path == "-" {
		if stdin == nil {
			stdin = os.Stdin
		}
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	path = displayName(path)
	if err != nil {
		return s, fmt.Errorf("read snapshot: %w", err)
	}
	// null where a value is required (the whole snapshot, "total_nodes":
	// null) decodes as zero, a cluster that is not the one meant.
	if err := jsonkeys.For(reflect.TypeOf(s), false).Check(b); err != nil {
		return s, fmt.Errorf("%s: not a snapshot: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%s: not a snapshot: %w", path, err)
	}
	if dec.More() {
		return s, fmt.Errorf("%s: not a snapshot: more than one JSON value", path)
	}
	return s, nil
}

// readUpcoming reads the ledger file of --upcoming.
func readUpcoming(path string) ([]policy.Upcoming, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read upcoming pilots: %w", err)
	}
	var up []policy.Upcoming
	if err := jsonkeys.For(reflect.TypeOf(up), false).Check(b); err != nil {
		return nil, fmt.Errorf("%s: not a list of upcoming pilots: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&up); err != nil {
		return nil, fmt.Errorf("%s: not a list of upcoming pilots: %w", path, err)
	}
	return up, nil
}

func displayName(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}
