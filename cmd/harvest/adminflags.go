package main

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/urfave/cli/v2"
)

// bound is the range an admin's setting must lie in. A typo (a sign, an
// extra zero) in a setting that sizes the harvest or paces the agent
// makes it hold or release the whole cluster, or sit on it for hours:
// such values are refused with the range, before anything starts.
// harvest agent, harvest decide and harvest queue serve check their
// flags here (whichever of them the command has), whatever set them:
// the command line, the environment or the --config file.
type bound struct {
	lo, hi int64 // a number, or a duration in nanoseconds
	off    bool  // 0 is also allowed (off, no cap, none), below lo
	dur    bool
	why    string // what lies past the range, if not plain
}

const day = 24 * time.Hour

var adminBounds = map[string]bound{
	// Pilot counts: the queue's own bound on the same settings.
	"min-nodes":   {lo: 0, hi: api.MaxNodes},
	"max-nodes":   {lo: 0, hi: api.MaxNodes},
	"recommended": {lo: 0, hi: api.MaxNodes},
	// A few nodes for a job that arrives; a site that wants more nodes
	// free caps the harvest with --max-nodes.
	"idle-margin":          {lo: 0, hi: 100, why: "the margin is kept for a job that arrives; cap the harvest with --max-nodes instead"},
	"max-submit-per-round": {lo: 0, hi: api.MaxNodes},
	"dump-keep":            {lo: 0, hi: 1_000_000},
	"backlog":              {lo: -1, hi: 1 << 40},
	// Pacing: below 10 ms the batch system is hammered; past an hour the
	// agent gives nothing back for that long.
	"poll":             {lo: int64(10 * time.Millisecond), hi: int64(time.Hour), dur: true},
	"fast-poll":        {lo: int64(10 * time.Millisecond), hi: int64(time.Hour), off: true, dur: true},
	"event-check":      {lo: int64(10 * time.Millisecond), hi: int64(time.Hour), off: true, dur: true},
	"snapshot-timeout": {lo: int64(time.Second), hi: int64(time.Hour), dur: true},
	"submit-timeout":   {lo: int64(time.Second), hi: int64(time.Hour), dur: true},
	"chart-window":     {lo: int64(time.Minute), hi: int64(31 * day), dur: true},
	// Pilot times.
	"mini-time":       {lo: 0, hi: int64(day), dur: true},
	"margin":          {lo: 0, hi: int64(day), dur: true},
	"granularity":     {lo: int64(time.Second), hi: int64(day), dur: true},
	"max-pilot-time":  {lo: int64(time.Minute), hi: int64(366 * day), off: true, dur: true},
	"max-pilot-limit": {lo: int64(time.Minute), hi: int64(366 * day), off: true, dur: true},
	"min-pilot-time":  {lo: int64(time.Minute), hi: int64(366 * day), off: true, dur: true},
	// The queue's quotas and timeouts.
	"max-unfinished-tasks-per-user": {lo: 0, hi: 1_000_000_000},
	"max-tokens-per-user":           {lo: 1, hi: 10_000},
	"lease-ttl":                     {lo: int64(time.Second), hi: int64(time.Hour), dur: true},
	"zombie-timeout":                {lo: int64(time.Second), hi: int64(7 * day), dur: true},
	"token-ttl":                     {lo: int64(time.Minute), hi: int64(10 * 366 * day), off: true, dur: true},
}

// checkAdminFlags refuses, all at once, the settings of c's command that
// lie outside their bounds, and the pairs that contradict each other.
func checkAdminFlags(c *cli.Context) error {
	has := map[string]bool{}
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			has[n] = true
		}
	}
	var errs []error
	names := make([]string, 0, len(adminBounds))
	for n := range adminBounds {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if has[n] {
			if err := adminBounds[n].check(c, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	durs := func(a, b string) (time.Duration, time.Duration, bool) {
		return c.Duration(a), c.Duration(b), has[a] && has[b] && c.Duration(a) > 0 && c.Duration(b) > 0
	}
	if has["min-nodes"] && has["max-nodes"] && c.IsSet("min-nodes") && c.Int("max-nodes") > 0 && c.Int("min-nodes") > c.Int("max-nodes") {
		errs = append(errs, fmt.Errorf("--min-nodes %d exceeds --max-nodes %d", c.Int("min-nodes"), c.Int("max-nodes")))
	}
	if lo, hi, ok := durs("min-pilot-time", "max-pilot-time"); ok && lo > hi {
		errs = append(errs, fmt.Errorf("--min-pilot-time %v is longer than --max-pilot-time %v", lo, hi))
	}
	return errors.Join(errs...)
}

func (b bound) check(c *cli.Context, name string) error {
	v := int64(c.Int(name))
	show := func(x int64) string { return fmt.Sprint(x) }
	if b.dur {
		v = int64(c.Duration(name))
		show = func(x int64) string { return time.Duration(x).String() }
	}
	if (v >= b.lo && v <= b.hi) || (b.off && v == 0) {
		return nil
	}
	allowed := show(b.lo) + " to " + show(b.hi)
	if b.off {
		allowed = "0 or " + allowed
	}
	why := ""
	if b.why != "" {
		why = ": " + b.why
	}
	return fmt.Errorf("--%s %s is out of range: allowed %s%s", name, show(v), allowed, why)
}
