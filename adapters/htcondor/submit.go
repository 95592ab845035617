package htcondor

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// Environment the adapter gives every pilot (unless the spec sets it).
const (
	// TimeLimitEnv is the pilot's lifetime as a Go duration ("1800s";
	// absent = unlimited), the value of `harvest pilot --time-limit`:
	// HTCondor gives a job no end time of its own, unlike SLURM.
	TimeLimitEnv = "HARVEST_TIME_LIMIT"
	// PilotIDEnv is the pilot's job id (cluster.proc), which `harvest
	// pilot` reads as its id.
	PilotIDEnv = "HARVEST_PILOT_ID"
)

// pilotLifetime is the lifetime a pilot asked for with limit gets: the
// configured maximum caps it, and "unlimited" means that maximum.
func pilotLifetime(limit cluster.Limit, max time.Duration) cluster.Limit {
	capL := cluster.Unlimited
	if max > 0 {
		capL = cluster.Limit(int64(max / time.Second))
	}
	return limit.Min(capL)
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// SubmitDescription renders the submit description of one pilot. It is
// pure; errors wrap adapters.ErrInvalidSpec and mean nothing may be
// submitted.
func SubmitDescription(c Config, spec adapters.PilotSpec) (string, error) {
	if err := spec.Validate(); err != nil {
		return "", err
	}
	invalid := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", adapters.ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	exe := spec.Command[0]
	if err := plainValue(exe); err != nil {
		return "", invalid("executable: %v", err)
	}
	args, err := quoteArguments(spec.Command[1:])
	if err != nil {
		return "", invalid("arguments: %v", err)
	}
	life := pilotLifetime(spec.TimeLimit, c.MaxLifetime)

	env := make(map[string]string, len(spec.Env)+1)
	for k, v := range spec.Env {
		if !envNameRE.MatchString(k) {
			return "", invalid("environment variable name %q", k)
		}
		env[k] = v
	}
	if _, set := env[TimeLimitEnv]; !set && !life.IsUnlimited() {
		env[TimeLimitEnv] = strconv.FormatInt(int64(life), 10) + "s"
	}
	envLine, err := quoteEnvironment(env)
	if err != nil {
		return "", invalid("environment: %v", err)
	}
	if _, set := spec.Env[PilotIDEnv]; !set {
		// Added after quoting: these macros are condor_submit's to expand.
		envLine = addEnvEntry(envLine, PilotIDEnv+"='$(Cluster).$(Process)'")
	}

	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	line("# harvest pilot %s, written by the harvest agent", c.Tag)
	line("universe = vanilla")
	line("executable = %s", escapeMacros(exe))
	// The pilot runs the harvest binary already installed on the
	// execute nodes; copying it would also break a relative argv[0].
	line("transfer_executable = false")
	if args != "" {
		line("arguments = %s", args)
	}
	if envLine != "" {
		line("environment = %s", envLine)
	}
	if spec.WorkDir != "" {
		if err := plainValue(spec.WorkDir); err != nil {
			return "", invalid("work dir: %v", err)
		}
		line("initialdir = %s", escapeMacros(spec.WorkDir))
	}
	switch {
	case spec.Output != "":
		// Already in HTCondor's syntax ($(Cluster) allowed): not escaped.
		if err := plainValue(spec.Output); err != nil {
			return "", invalid("output: %v", err)
		}
		line("output = %s", spec.Output)
		line("error = %s", spec.Output)
	case c.OutputDir != "":
		base := filepath.Join(c.OutputDir, c.Tag)
		line("output = %s-$(Cluster).$(Process).out", base)
		line("error = %s-$(Cluster).$(Process).err", base)
		line("log = %s-$(Cluster).log", base)
	default:
		line("output = /dev/null")
		line("error = /dev/null")
	}
	if c.SlotCPUs > 0 {
		line("request_cpus = %d", c.SlotCPUs)
		if c.SlotMemoryMB > 0 {
			line("request_memory = %d", c.SlotMemoryMB)
		}
	} else {
		// The whole partitionable slot: the requests are evaluated against
		// the matched slot; without one (the schedd's own bookkeeping)
		// they fall back to one CPU. The requirement picks only slots
		// nobody has carved yet.
		line("request_cpus = ifThenElse(isUndefined(TARGET.TotalSlotCpus), 1, TARGET.TotalSlotCpus)")
		line("request_memory = ifThenElse(isUndefined(TARGET.TotalSlotMemory), 1, TARGET.TotalSlotMemory)")
		line("requirements = (TARGET.PartitionableSlot =!= true) || ((TARGET.Cpus == TARGET.TotalSlotCpus) && (TARGET.Memory == TARGET.TotalSlotMemory))")
	}
	line("+%s = %q", attrPilot, c.Tag) // the tag is [A-Za-z0-9._-]: %q is a valid ClassAd string
	line("batch_name = %s", c.Tag)
	if !life.IsUnlimited() {
		n := int64(life)
		line("+%s = %d", attrLifetime, n)
		switch c.Lifetime {
		case LifetimeAllowedJobDuration:
			line("allowed_job_duration = %d", n)
			// Hold code 46 (JobDurationExceeded): do not leave the held
			// pilot in the queue.
			line("periodic_remove = (JobStatus == 5) && (HoldReasonCode == 46)")
		default:
			line("periodic_remove = (JobStatus == 2) && ((time() - JobCurrentStartDate) > %d)", n)
		}
	}
	line("notification = never")
	for _, l := range c.ExtraSubmit {
		line("%s", l)
	}
	line("queue 1")
	return b.String(), nil
}

// plainValue checks a value written bare on a submit-description line.
func plainValue(v string) error {
	switch {
	case strings.ContainsAny(v, "\r\n\x00"):
		return fmt.Errorf("%q holds a line break or NUL", v)
	case strings.TrimSpace(v) != v:
		return fmt.Errorf("%q has leading or trailing blanks", v)
	case strings.HasSuffix(v, `\`):
		return fmt.Errorf("%q ends in a backslash (a line continuation)", v)
	}
	return nil
}

// escapeMacros keeps condor_submit from expanding $(...) in a value: a
// literal '$' is written as the predefined macro $(DOLLAR).
func escapeMacros(v string) string { return strings.ReplaceAll(v, "$", "$(DOLLAR)") }

// quoteArguments renders argv in the "new syntax" of the arguments
// command: the whole list in double quotes, each argument in single
// quotes, a ' inside doubled to ”, a " doubled to "".
func quoteArguments(argv []string) (string, error) {
	if len(argv) == 0 {
		return "", nil
	}
	parts := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsAny(a, "\r\n\x00") {
			return "", fmt.Errorf("argument %d holds a line break or NUL", i+1)
		}
		parts[i] = "'" + quoteNew(a) + "'"
	}
	return `"` + strings.Join(parts, " ") + `"`, nil
}

// quoteEnvironment renders env in the new syntax of the environment
// command: "NAME='value' ...", sorted for a stable description.
func quoteEnvironment(env map[string]string) (string, error) {
	if len(env) == 0 {
		return "", nil
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := env[k]
		if strings.ContainsAny(v, "\r\n\x00") {
			return "", fmt.Errorf("%s holds a line break or NUL", k)
		}
		parts[i] = k + "='" + quoteNew(v) + "'"
	}
	return `"` + strings.Join(parts, " ") + `"`, nil
}

// addEnvEntry appends one already-quoted entry to a new-syntax
// environment value ("" = none yet).
func addEnvEntry(line, entry string) string {
	if line == "" {
		return `"` + entry + `"`
	}
	return line[:len(line)-1] + " " + entry + `"`
}

func quoteNew(s string) string {
	s = strings.ReplaceAll(s, "'", "''")
	s = strings.ReplaceAll(s, `"`, `""`)
	return escapeMacros(s)
}
