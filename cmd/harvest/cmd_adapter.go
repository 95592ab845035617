package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/builtin"
	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"
)

// adapterFlags select and configure the batch-system adapter; shared by
// `harvest agent` and `harvest adapter snapshot|info`.
func adapterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "adapter", Value: "slurm", EnvVars: []string{"HARVEST_ADAPTER"},
			Usage: "batch-system adapter: a built-in name (" + strings.Join(builtin.Names(), ", ") + ") or the path of a plugin binary"},
		&cli.StringSliceFlag{Name: "adapter-opt", EnvVars: []string{"HARVEST_ADAPTER_OPTS"},
			Usage: "adapter option `KEY=VALUE` (repeatable; e.g. partition=batch, tag=harvest-pilot, timeout=10s)"},
		&cli.BoolFlag{Name: "adapter-in-process", EnvVars: []string{"HARVEST_ADAPTER_IN_PROCESS"},
			Usage: "run a built-in adapter inside this process instead of as a go-plugin subprocess"},
	}
}

// openAdapter starts the adapter the flags name. Built-in adapters run as
// `harvest adapter serve NAME` plugins (the same path a site's plugin
// takes) unless --adapter-in-process is given.
func openAdapter(c *cli.Context, log *slog.Logger) (adapters.Adapter, func(), error) {
	name := c.String("adapter")
	opts, err := adapters.ParseOptions(c.StringSlice("adapter-opt"))
	if err != nil {
		return nil, nil, err
	}
	if builtin.IsBuiltin(name) && c.Bool("adapter-in-process") {
		a, err := builtin.New(name, opts)
		return a, func() {}, err
	}
	var cmd *exec.Cmd
	switch {
	case builtin.IsBuiltin(name):
		self, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("find own binary to serve adapter %s: %w", name, err)
		}
		cmd = exec.Command(self, "adapter", "serve", name)
	case strings.ContainsRune(name, os.PathSeparator):
		if _, err := os.Stat(name); err != nil {
			return nil, nil, fmt.Errorf("adapter plugin: %w", err)
		}
		cmd = exec.Command(name)
	default:
		_, err := builtin.New(name, opts) // for its "unknown adapter" message
		return nil, nil, err
	}
	l, err := adapters.Launch(cmd, opts, hclogFor(log))
	if err != nil {
		return nil, nil, err
	}
	log.Info("adapter plugin started", "adapter", name, "pid", l.Pid())
	return l, l.Close, nil
}

// hclogFor routes go-plugin's logs (including the plugin's stderr) to slog
// at warning level and above.
func hclogFor(log *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "adapter", Level: hclog.Warn, Output: os.Stderr})
}

func adapterCommand() *cli.Command {
	return &cli.Command{
		Name:  "adapter",
		Usage: "serve, list and query batch-system adapters",
		Subcommands: []*cli.Command{
			{
				Name:      "serve",
				Usage:     "serve a built-in adapter as a go-plugin (the agent runs this; not for interactive use)",
				ArgsUsage: "NAME",
				Description: "Serves a built-in adapter over hashicorp/go-plugin (gRPC) on stdin/stdout. Options come from\n" +
					"the " + adapters.OptionsEnv + " environment variable (a JSON object of strings) set by the agent,\n" +
					"and --opt flags, which win.",
				Flags: []cli.Flag{&cli.StringSliceFlag{Name: "opt", Usage: "adapter option `KEY=VALUE`"}},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("usage: harvest adapter serve NAME (one of: "+strings.Join(builtin.Names(), ", ")+")", 2)
					}
					opts, err := adapters.OptionsFromEnv()
					if err != nil {
						return cli.Exit(err.Error(), 2)
					}
					extra, err := adapters.ParseOptions(c.StringSlice("opt"))
					if err != nil {
						return cli.Exit(err.Error(), 2)
					}
					for k, v := range extra {
						opts[k] = v
					}
					a, err := builtin.New(c.Args().First(), opts)
					if err != nil {
						return cli.Exit(err.Error(), 2)
					}
					limitDaemonMemory()
					adapters.Serve(a, hclog.New(&hclog.LoggerOptions{Name: "adapter-" + c.Args().First(), Output: os.Stderr, Level: hclog.Info, JSONFormat: true}))
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list the built-in adapters",
				Action: func(c *cli.Context) error {
					for _, n := range builtin.Names() {
						fmt.Fprintf(c.App.Writer, "%-10s %s\n", n, builtin.Usage(n))
					}
					return nil
				},
			},
			{
				Name:  "snapshot",
				Usage: "print what the adapter sees now, as a `harvest decide` snapshot (JSON)",
				Description: "Useful to check an adapter's configuration and to capture a snapshot for\n" +
					"`harvest decide --snapshot FILE`.",
				Flags:  adapterFlags(),
				Action: func(c *cli.Context) error { return adapterQuery(c, "snapshot") },
			},
			{
				Name:   "info",
				Usage:  "print the adapter's description (name, version, tag, time granularity)",
				Flags:  adapterFlags(),
				Action: func(c *cli.Context) error { return adapterQuery(c, "info") },
			},
		},
	}
}

func adapterQuery(c *cli.Context, what string) error {
	log := newLogger(c.App.ErrWriter, "info", false)
	a, closeFn, err := openAdapter(c, log)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(c.Context, time.Minute)
	defer cancel()
	var v any
	if what == "info" {
		v, err = a.Info(ctx)
	} else {
		v, err = a.Snapshot(ctx)
	}
	if err != nil {
		return cli.Exit(fmt.Sprintf("%s: %v", what, err), 1)
	}
	enc := json.NewEncoder(c.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
