package slurm

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config configures the SLURM adapter. Only cmd/ (or a plugin's option
// map, via NewFromOptions) fills it in.
type Config struct {
	// Tag is the job name of every pilot. Pilots are the jobs of the
	// agent's own user with exactly this name, so a restarted agent finds
	// them again from squeue alone. Default "harvest-pilot".
	Tag string
	// Partition to harvest; empty = the cluster's default partition.
	// Snapshots describe this partition only and pilots are submitted to it.
	Partition string
	// PreemptPartition is where preemptible pilots go (the pilots above
	// the admin's floor, when the agent runs in preemption mode): empty =
	// detected (DetectPreemption: a partition over the same nodes whose
	// jobs the harvested partition's preempt at once); "none" = never.
	PreemptPartition string
	// Account and QOS are passed to sbatch (-A, -q) when set.
	Account string
	QOS     string
	// SbatchArgs are extra sbatch arguments, appended verbatim (for
	// example "--constraint=bigmem" or "--reservation=harvest").
	SbatchArgs []string
	// Export is sbatch's --export value. Default "NONE": the pilot starts
	// from the user's login environment (HOME, PATH, USER...) plus the
	// spec's Env, which the adapter writes into the batch script, instead
	// of inheriting the agent daemon's environment and its secrets. Set
	// "ALL" or a list of names ("PATH,LD_LIBRARY_PATH") to pass more.
	Export string
	// Exclusive asks for whole nodes (--exclusive). select/linear gives
	// whole nodes anyway; with select/cons_tres a one-node pilot would
	// otherwise get one CPU. Default true.
	Exclusive bool
	// Timeout bounds every command. Default 10 s. squeue takes about 9 s
	// to give up on a dead controller by itself.
	Timeout time.Duration
	// MaxOutput caps what one command may print, in bytes; past it the
	// command is killed and the snapshot fails with a clear error, rather
	// than the agent's memory growing with a runaway answer. Default 64
	// MiB: about 800,000 squeue lines (ten times the 100,000 jobs the
	// benchmark parses in under a second).
	MaxOutput int64
	// MaxJobs and MaxNodes bound what a snapshot keeps: a job list or a
	// node list longer than this fails the snapshot (as output past
	// MaxOutput does) while it is read, so the agent's memory stays
	// bounded by these counts, not by what a broken or foreign squeue or
	// sinfo prints. Defaults 300,000 jobs (30 times SLURM's default
	// MaxJobCount) and 100,000 nodes (ten times the largest clusters);
	// about 160 MB of snapshot at both.
	MaxJobs, MaxNodes int
	// BinDir holds squeue, sinfo, scontrol, sbatch, scancel and sdiag; empty =
	// found on PATH. The individual paths below override it.
	BinDir                                          string
	Squeue, Sinfo, Scontrol, Sbatch, Scancel, Sdiag string
	// SlurmConf is passed to every command as SLURM_CONF; empty = the
	// agent's own SLURM_CONF, or SLURM's default (/etc/slurm/slurm.conf).
	SlurmConf string
	// OutputDir is where pilot stdout/stderr go (harvest-pilot-%j.out) and
	// the pilots' working directory when the spec sets none; empty =
	// SLURM's default (slurm-%j.out in the working directory).
	OutputDir string
	// User is the agent's user name, the owner of every pilot; empty =
	// the user running the agent.
	User string
}

// DefaultConfig returns the defaults described on each field.
func DefaultConfig() Config {
	return Config{
		Tag:       "harvest-pilot",
		Export:    "NONE",
		Exclusive: true,
		Timeout:   10 * time.Second,
		MaxOutput: 64 << 20,
		MaxJobs:   300_000,
		MaxNodes:  100_000,
	}
}

// tagRE is what a tag may look like: it is a job name that squeue -n
// matches exactly (no commas, which -n would split on, no spaces).
var tagRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// simpleRE is what partition, account and QOS names may look like.
var simpleRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ErrConfig is wrapped by every Validate error.
var ErrConfig = errors.New("invalid slurm adapter config")

// Validate checks the configuration.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	if !tagRE.MatchString(c.Tag) {
		return bad("tag %q must be 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit", c.Tag)
	}
	for name, v := range map[string]string{"partition": c.Partition, "preempt_partition": c.PreemptPartition, "account": c.Account, "qos": c.QOS} {
		if v != "" && !simpleRE.MatchString(v) {
			return bad("%s %q must be a plain name of [A-Za-z0-9._-]", name, v)
		}
	}
	if c.PreemptPartition != "" && c.PreemptPartition == c.Partition {
		return bad("preempt_partition %q is the harvested partition itself", c.PreemptPartition)
	}
	if c.Timeout <= 0 {
		return bad("timeout must be positive, got %s", c.Timeout)
	}
	if c.MaxOutput < 1<<20 {
		return bad("max_output must be at least 1 MiB, got %d bytes", c.MaxOutput)
	}
	if c.Export == "" || strings.ContainsAny(c.Export, " \t\n") {
		return bad("export %q must be NONE, ALL or a comma-separated list of names", c.Export)
	}
	for _, a := range c.SbatchArgs {
		if !strings.HasPrefix(a, "-") {
			// A bare word would be taken as the batch script's path.
			return bad("sbatch argument %q must be an option (start with '-'); use --opt=value", a)
		}
		for _, owned := range []string{"--parsable", "--job-name", "-J", "--wrap", "--export"} {
			if a == owned || strings.HasPrefix(a, owned+"=") {
				return bad("sbatch argument %q is set by the adapter", a)
			}
		}
	}
	for name, p := range map[string]string{"bin_dir": c.BinDir, "output_dir": c.OutputDir, "slurm_conf": c.SlurmConf} {
		if p != "" && !filepath.IsAbs(p) {
			return bad("%s %q must be an absolute path", name, p)
		}
	}
	if c.User != "" && !simpleRE.MatchString(c.User) {
		return bad("user %q is not a user name", c.User)
	}
	return nil
}

// binary returns the path of one SLURM command.
func (c Config) binary(name, override string) string {
	if override != "" {
		return override
	}
	if c.BinDir != "" {
		return filepath.Join(c.BinDir, name)
	}
	return name
}

// NewFromOptions builds an adapter from a plugin's string options. Keys:
// tag, partition, preempt_partition, account, qos, timeout (Go duration, "10s"),
// max_output_mb (whole MiB), max_jobs, max_nodes, sbatch_args
// (space-separated), export, exclusive (true/false), output_dir, bin_dir,
// slurm_conf, user. Unknown keys are an error, so a typo is not ignored.
func NewFromOptions(opts map[string]string) (*Adapter, error) {
	cfg, err := ConfigFromOptions(opts)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// ConfigFromOptions maps string options onto DefaultConfig (see
// NewFromOptions for the keys).
func ConfigFromOptions(opts map[string]string) (Config, error) {
	cfg := DefaultConfig()
	for k, v := range opts {
		switch k {
		case "tag":
			cfg.Tag = v
		case "partition":
			cfg.Partition = v
		case "preempt_partition":
			cfg.PreemptPartition = v
		case "account":
			cfg.Account = v
		case "qos":
			cfg.QOS = v
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return cfg, fmt.Errorf("%w: timeout %q: %v", ErrConfig, v, err)
			}
			cfg.Timeout = d
		case "max_output_mb":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 || n > 1<<20 {
				return cfg, fmt.Errorf("%w: max_output_mb %q must be a whole number of MiB from 1 to 1048576", ErrConfig, v)
			}
			cfg.MaxOutput = n << 20
		case "max_jobs", "max_nodes":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100_000_000 {
				return cfg, fmt.Errorf("%w: %s %q must be a whole number from 1 to 100000000", ErrConfig, k, v)
			}
			if k == "max_jobs" {
				cfg.MaxJobs = n
			} else {
				cfg.MaxNodes = n
			}
		case "sbatch_args":
			cfg.SbatchArgs = strings.Fields(v)
		case "export":
			cfg.Export = v
		case "exclusive":
			switch v {
			case "true", "1", "yes":
				cfg.Exclusive = true
			case "false", "0", "no":
				cfg.Exclusive = false
			default:
				return cfg, fmt.Errorf("%w: exclusive %q must be true or false", ErrConfig, v)
			}
		case "output_dir":
			cfg.OutputDir = v
		case "bin_dir":
			cfg.BinDir = v
		case "slurm_conf":
			cfg.SlurmConf = v
		case "user":
			cfg.User = v
		default:
			return cfg, fmt.Errorf("%w: unknown option %q", ErrConfig, k)
		}
	}
	return cfg, cfg.Validate()
}
