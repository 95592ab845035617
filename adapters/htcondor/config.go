package htcondor

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
)

// Lifetime names how a pilot's lifetime is enforced by HTCondor.
type Lifetime string

const (
	// LifetimePeriodicRemove removes the pilot with
	// periodic_remove = (JobStatus == 2) && ((time() - JobCurrentStartDate) > N).
	// Works on every HTCondor version; the schedd evaluates it every
	// PERIODIC_EXPR_INTERVAL (60 s by default), so a pilot may outlive its
	// limit by up to that interval. The default.
	LifetimePeriodicRemove Lifetime = "periodic_remove"
	// LifetimeAllowedJobDuration uses the allowed_job_duration submit
	// command (newer HTCondor), which puts the job on hold when its limit
	// is reached; a periodic_remove then removes pilots held for that
	// reason so they do not pile up in the queue.
	LifetimeAllowedJobDuration Lifetime = "allowed_job_duration"
)

// Config configures the HTCondor adapter. Only cmd/ maps flags onto it;
// plugins get it through NewFromOptions.
type Config struct {
	// Tag marks pilots: their HarvestPilot attribute and batch name.
	Tag string
	// Pool is the central manager (condor_status/-q/-submit/-rm -pool);
	// empty = the local configuration's COLLECTOR_HOST.
	Pool string
	// Schedd is the schedd to submit to and query (-name); empty = local.
	Schedd string
	// CommandTimeout bounds every condor_* command.
	CommandTimeout time.Duration
	// BinDir holds the condor_* commands; empty = look them up in PATH.
	BinDir string
	// SlotCPUs and SlotMemoryMB size a pilot's slot. Zero CPUs = the whole
	// machine (the whole partitionable slot it matches).
	SlotCPUs     int
	SlotMemoryMB int
	// MaxLifetime is the longest a pilot may live. HTCondor has no
	// backfill reservations, so pilots asked for "as long as allowed" get
	// this; 0 = no limit (pilots live until the agent removes them).
	MaxLifetime time.Duration
	// Lifetime is how the limit is enforced.
	Lifetime Lifetime
	// ExtraSubmit are submit-description lines added before `queue`
	// (accounting_group = ..., requirements = ...).
	ExtraSubmit []string
	// OutputDir receives the pilots' stdout, stderr and event log; empty
	// = discard them (/dev/null).
	OutputDir string
	// Format is the output format asked of condor_q and condor_status.
	Format Format
	// SubmitUser is the account condor_submit runs as (through runuser)
	// when the agent runs as root: HTCondor refuses jobs owned by root or
	// by its own daemon account, so a root agent needs an ordinary
	// submitter account. Empty = submit as the agent's own user.
	SubmitUser string
	// LimitAttributes are job attributes that hold a lifetime limit in
	// seconds at this site (e.g. "MaxRuntime"), read as foreign jobs'
	// time limits besides AllowedJobDuration and periodic_remove.
	LimitAttributes []string
	// MaxOutput caps what condor_q or condor_status may print, in bytes;
	// past it the command is killed and the snapshot refused. MaxJobs and
	// MaxSlots bound the ads kept from their answers, counted while they
	// are read (one ad at a time): the adapter's memory stays bounded by
	// these, not by what the pool prints.
	MaxOutput         int64
	MaxJobs, MaxSlots int
}

// DefaultConfig returns the defaults: tag "harvest-pilot", 10 s command
// timeout, whole-machine pilots living at most 24 h, JSON output.
func DefaultConfig() Config {
	return Config{
		Tag:            "harvest-pilot",
		CommandTimeout: 10 * time.Second,
		MaxLifetime:    24 * time.Hour,
		Lifetime:       LifetimePeriodicRemove,
		Format:         FormatJSON,
		MaxOutput:      64 << 20,
		MaxJobs:        300_000,
		MaxSlots:       100_000,
	}
}

var (
	tagRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	hostRE     = regexp.MustCompile(`^[A-Za-z0-9._:@\[\]-]+$`)
	userRE     = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	reservedRE = regexp.MustCompile(`(?i)^\s*(queue\b|\+?(my\.)?harvest(pilot|lifetime)\s*=)`)
)

// Validate reports the first problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !tagRE.MatchString(c.Tag) {
		bad("tag %q: want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", c.Tag)
	}
	if c.Pool != "" && !hostRE.MatchString(c.Pool) {
		bad("pool %q is not a host[:port]", c.Pool)
	}
	if c.Schedd != "" && !hostRE.MatchString(c.Schedd) {
		bad("schedd %q is not a schedd name", c.Schedd)
	}
	if c.CommandTimeout <= 0 {
		bad("command timeout must be positive, got %v", c.CommandTimeout)
	}
	if c.BinDir != "" && !filepath.IsAbs(c.BinDir) {
		bad("bin dir %q must be an absolute path", c.BinDir)
	}
	if c.SlotCPUs < 0 || c.SlotMemoryMB < 0 {
		bad("slot cpus and memory must not be negative")
	}
	if c.SlotCPUs == 0 && c.SlotMemoryMB > 0 {
		bad("slot memory %d MB without slot cpus: set both, or neither for whole machines", c.SlotMemoryMB)
	}
	if c.MaxLifetime < 0 {
		bad("max lifetime must not be negative (0 = no limit), got %v", c.MaxLifetime)
	} else if c.MaxLifetime > 0 && c.MaxLifetime < time.Second {
		bad("max lifetime %v is below HTCondor's one-second granularity", c.MaxLifetime)
	}
	if c.Lifetime != LifetimePeriodicRemove && c.Lifetime != LifetimeAllowedJobDuration {
		bad("lifetime enforcement %q: want %q or %q", c.Lifetime, LifetimePeriodicRemove, LifetimeAllowedJobDuration)
	}
	for _, l := range c.ExtraSubmit {
		switch {
		case strings.TrimSpace(l) == "":
			bad("empty extra submit line")
		case strings.ContainsAny(l, "\r\n"):
			bad("extra submit line %q holds a line break", l)
		case strings.HasSuffix(l, `\`):
			bad("extra submit line %q ends in a line continuation", l)
		case reservedRE.MatchString(l):
			bad("extra submit line %q sets what the adapter owns (queue, HarvestPilot, HarvestLifetime)", l)
		}
	}
	if c.OutputDir != "" && !filepath.IsAbs(c.OutputDir) {
		bad("output dir %q must be an absolute path", c.OutputDir)
	}
	if strings.ContainsAny(c.OutputDir, "\r\n$") {
		bad("output dir %q holds a line break or '$'", c.OutputDir)
	}
	if c.SubmitUser != "" && !userRE.MatchString(c.SubmitUser) {
		bad("submit user %q is not an account name", c.SubmitUser)
	}
	if c.Format != FormatJSON && c.Format != FormatLong {
		bad("format %q: want %q or %q", c.Format, FormatJSON, FormatLong)
	}
	if c.MaxOutput < 1<<20 || c.MaxOutput > 1<<40 {
		bad("max output must be from 1 MiB to 1 TiB, got %d bytes", c.MaxOutput)
	}
	if c.MaxJobs < 1 || c.MaxJobs > 100_000_000 || c.MaxSlots < 1 || c.MaxSlots > 100_000_000 {
		bad("max jobs and max slots must be from 1 to 100000000, got %d and %d", c.MaxJobs, c.MaxSlots)
	}
	for _, a := range c.LimitAttributes {
		if !isAttrName(a) {
			bad("limit attribute %q is not a ClassAd attribute name", a)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("htcondor config: %w", err)
	}
	return nil
}

// Option keys understood by NewFromOptions.
var optionKeys = []string{
	"tag", "pool", "schedd", "timeout", "bin_dir", "slot_cpus", "slot_memory_mb",
	"max_lifetime", "lifetime", "submit_lines", "output_dir", "format", "limit_attributes",
	"submit_user", "max_output_mb", "max_jobs", "max_slots",
}

// ConfigFromOptions maps the string options a plugin receives onto a
// Config (defaults for absent keys). Durations use Go syntax ("12h",
// "90m"); submit_lines are separated by line breaks; limit_attributes by
// commas. Unknown keys are an error, so a typo is caught at start.
func ConfigFromOptions(o map[string]string) (Config, error) {
	c := DefaultConfig()
	if err := adapters.UnknownOptions(o, optionKeys...); err != nil {
		return c, err
	}
	var errs []error
	dur := func(key string, dst *time.Duration) {
		if v, ok := o[key]; ok {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				errs = append(errs, fmt.Errorf("option %s: %w", key, err))
				return
			}
			*dst = d
		}
	}
	integer := func(key string, dst *int) {
		if v, ok := o[key]; ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				errs = append(errs, fmt.Errorf("option %s: %w", key, err))
				return
			}
			*dst = n
		}
	}
	str := func(key string, dst *string) {
		if v, ok := o[key]; ok {
			*dst = strings.TrimSpace(v)
		}
	}
	str("tag", &c.Tag)
	str("pool", &c.Pool)
	str("schedd", &c.Schedd)
	dur("timeout", &c.CommandTimeout)
	str("bin_dir", &c.BinDir)
	integer("slot_cpus", &c.SlotCPUs)
	integer("slot_memory_mb", &c.SlotMemoryMB)
	dur("max_lifetime", &c.MaxLifetime)
	integer("max_jobs", &c.MaxJobs)
	integer("max_slots", &c.MaxSlots)
	if v, ok := o["max_output_mb"]; ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil || n < 1 || n > 1<<20 {
			errs = append(errs, fmt.Errorf("option max_output_mb %q: want a whole number of MiB from 1 to 1048576", v))
		} else {
			c.MaxOutput = n << 20
		}
	}
	if v, ok := o["lifetime"]; ok {
		c.Lifetime = Lifetime(strings.TrimSpace(v))
	}
	if v, ok := o["submit_lines"]; ok {
		for _, l := range strings.Split(v, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				c.ExtraSubmit = append(c.ExtraSubmit, l)
			}
		}
	}
	str("output_dir", &c.OutputDir)
	str("submit_user", &c.SubmitUser)
	if v, ok := o["format"]; ok {
		c.Format = Format(strings.TrimSpace(v))
	}
	if v, ok := o["limit_attributes"]; ok {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				c.LimitAttributes = append(c.LimitAttributes, a)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("htcondor options: %w", err)
	}
	return c, c.Validate()
}

// NewFromOptions builds an adapter from a plugin's string options.
func NewFromOptions(o map[string]string) (*Adapter, error) {
	c, err := ConfigFromOptions(o)
	if err != nil {
		return nil, err
	}
	return New(c)
}
