// Package builtin lists the adapters compiled into the harvest binary.
// `harvest adapter serve NAME` serves one of them as a go-plugin, and the
// agent launches that (or a site's own plugin binary) by default.
package builtin

import (
	"fmt"
	"sort"
	"strings"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/htcondor"
	"github.com/harvest-hpc/harvest/adapters/slurm"
)

// Factory builds an adapter from string options (plugins get options as
// a string map, see adapters.OptionsEnv).
type Factory func(opts map[string]string) (adapters.Adapter, error)

var registry = map[string]struct {
	factory Factory
	usage   string
}{
	"slurm": {
		func(o map[string]string) (adapters.Adapter, error) { return slurm.NewFromOptions(o) },
		"SLURM through squeue/sinfo/scontrol/sbatch/scancel",
	},
	"htcondor": {
		func(o map[string]string) (adapters.Adapter, error) { return htcondor.NewFromOptions(o) },
		"HTCondor through condor_status/condor_q/condor_submit/condor_rm",
	},
}

// Register adds a built-in adapter (used by packages that cannot be
// imported here without a cycle).
func Register(name, usage string, f Factory) {
	registry[name] = struct {
		factory Factory
		usage   string
	}{f, usage}
}

// New builds the built-in adapter called name.
func New(name string, opts map[string]string) (adapters.Adapter, error) {
	e, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown adapter %q (built in: %s; or give the path of a plugin binary)", name, strings.Join(Names(), ", "))
	}
	return e.factory(opts)
}

// Names lists the built-in adapters, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Usage describes a built-in adapter in one line.
func Usage(name string) string { return registry[name].usage }

// IsBuiltin reports whether name is a built-in adapter.
func IsBuiltin(name string) bool {
	_, ok := registry[name]
	return ok
}
