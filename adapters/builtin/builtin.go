// Package builtin is the catalog of the adapters compiled into the harvest
// binary. `harvest adapter serve NAME` serves one of them as a go-plugin,
// and the agent launches that (or a site's own plugin binary) by default.
package builtin

import (
	"fmt"
	"strings"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/htcondor"
	"github.com/harvest-hpc/harvest/adapters/simlive"
	"github.com/harvest-hpc/harvest/adapters/slurm"
)

// Factory builds an adapter from string options (plugins get options as
// a string map, see adapters.OptionsEnv).
type Factory func(opts map[string]string) (adapters.Adapter, error)

// entry is one built-in adapter.
type entry struct {
	name, usage string
	factory     Factory
}

// catalog is every built-in adapter, sorted by name.
var catalog = []entry{
	{"htcondor", "HTCondor through condor_status/condor_q/condor_submit/condor_rm",
		func(o map[string]string) (adapters.Adapter, error) { return htcondor.NewFromOptions(o) }},
	{"sim", "a simulated cluster in real time with a synthetic foreign workload (demos and tests; options: " + simlive.OptionList + ")",
		func(o map[string]string) (adapters.Adapter, error) { return simlive.NewFromOptions(o) }},
	{"slurm", "SLURM through squeue/sinfo/scontrol/sbatch/scancel",
		func(o map[string]string) (adapters.Adapter, error) { return slurm.NewFromOptions(o) }},
}

func find(name string) (entry, bool) {
	for _, e := range catalog {
		if e.name == name {
			return e, true
		}
	}
	return entry{}, false
}

// New builds the built-in adapter called name.
func New(name string, opts map[string]string) (adapters.Adapter, error) {
	e, ok := find(name)
	if !ok {
		return nil, fmt.Errorf("unknown adapter %q (built in: %s; or give the path of a plugin binary)", name, strings.Join(Names(), ", "))
	}
	return e.factory(opts)
}

// Names lists the built-in adapters, sorted.
func Names() []string {
	out := make([]string, len(catalog))
	for i, e := range catalog {
		out[i] = e.name
	}
	return out
}

// Usage describes a built-in adapter in one line ("" if unknown).
func Usage(name string) string {
	e, _ := find(name)
	return e.usage
}

// IsBuiltin reports whether name is a built-in adapter.
func IsBuiltin(name string) bool {
	_, ok := find(name)
	return ok
}
