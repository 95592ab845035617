// Command memory-plugin is a complete external adapter plugin: an
// in-memory cluster served over hashicorp/go-plugin. It shows what a site
// writes to support another batch system without rebuilding harvest:
// implement adapters.Adapter and call adapters.Serve. Run it with
//
//	harvest agent --adapter /path/to/memory-plugin --adapter-opt nodes=8
package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/hashicorp/go-hclog"
)

func main() {
	log := hclog.New(&hclog.LoggerOptions{Name: "memory-plugin", Output: os.Stderr, JSONFormat: true})
	opts, err := adapters.OptionsFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := adapters.UnknownOptions(opts, "nodes", "tag"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	n := 4
	if v, ok := opts["nodes"]; ok {
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "nodes=%q: want a positive integer\n", v)
			os.Exit(2)
		}
	}
	m := adaptertest.NewMemory(n)
	if tag := opts["tag"]; tag != "" {
		m.Tag = tag
	}
	adapters.Serve(m, log)
}
