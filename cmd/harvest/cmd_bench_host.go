package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/pilot/bench"
)

func benchHostCommand() *cli.Command {
	d := bench.DefaultHostConfig()
	return &cli.Command{
		Name:  "host",
		Usage: "what this machine alone does to a write transaction: the floor under `harvest bench dispatch`'s slow transactions",
		Description: "Runs, on one thread, a computation as long as a write transaction's own work (--work, calibrated\n" +
			"on this CPU: registers only, no memory, no lock, no system call) under the thread's own policy (the\n" +
			"queue runs nothing real-time), then sleeps --pause, as the writer does between transactions, for\n" +
			"--duration. Nothing of harvest runs meanwhile, so every computation that takes\n" +
			"longer than its calibrated length was stretched by the machine: the hypervisor taking the vCPU\n" +
			"away (stolen time), or, when the thread was preempted, something of higher priority in the guest.\n" +
			"Reports the computations' wall times, how many went past --threshold (the queue's 5 ms), per\n" +
			"10,000 and per second of computing, and the machine's stolen share. A run of `harvest bench\n" +
			"dispatch` that held the write lock T seconds can expect about (slow per second of computing) x T\n" +
			"transactions past 5 ms from the machine alone. Run it on an otherwise idle machine.",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "duration", Value: d.Duration, Usage: "how long to probe (at most 1h)"},
			&cli.DurationFlag{Name: "work", Value: d.Work, Usage: "each computation's length (the write transactions' mean)"},
			&cli.DurationFlag{Name: "pause", Value: d.Pause, Usage: "sleep between computations"},
			&cli.DurationFlag{Name: "threshold", Value: d.Threshold, Usage: "a computation longer than this is slow"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: runBenchHost,
	}
}

func runBenchHost(c *cli.Context) error {
	cfg := bench.HostConfig{Duration: c.Duration("duration"), Work: c.Duration("work"), Pause: c.Duration("pause"),
		Threshold: c.Duration("threshold")}
	errw := c.App.ErrWriter
	if errw == nil {
		errw = os.Stderr
	}
	// Progress on stderr, one line every 10 s: the probe is long and
	// silent otherwise.
	shown := 0
	cfg.Progress = func(done time.Duration) {
		if tens := int(done / (10 * time.Second)); tens > shown {
			shown = tens
			fmt.Fprintf(errw, "harvest bench host: %d s of %s\n", 10*tens, cfg.Duration)
		}
	}
	r, err := bench.ProbeHost(cfg)
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest bench host: %v", err), 2)
	}
	out := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // the priority's ">=" as written
		return enc.Encode(r)
	}
	fmt.Fprintf(out, "host probe: %d computations of %.2f ms (calibrated; registers only: no memory, no lock, no system call), each followed by a %.2f ms sleep, over %.1f s\n",
		r.Computations, r.WorkMS, r.PauseMS, r.DurationS)
	fmt.Fprintf(out, "under: %s\n", r.Priority)
	fmt.Fprintf(out, "the machine during the probe: %.0f%% busy, %.1f%% stolen by the hypervisor (/proc/stat)\n", r.BusyPct, r.StealPct)
	fmt.Fprintf(out, "wall time of a computation: p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, longest %.1f ms\n", r.P50MS, r.P99MS, r.P999MS, r.LongestMS)
	fmt.Fprintf(out, "over %.0f ms: %d (%.1f per 10,000; %.2f per second of computing, %.1f s computed)\n", r.ThresholdMS, r.Slow, r.SlowPer10k, r.SlowPerComputeS, r.ComputeS)
	if r.Slow > 0 {
		fmt.Fprintf(out, "of the %d: %d preempted inside this machine, %d charged to the thread's CPU clock as if it had computed (longest on that clock: %.1f ms)\n",
			r.Slow, r.SlowPreempted, r.SlowCharged, r.LongestCPUMS)
	}
	fmt.Fprintf(out, "a run whose write lock was held T s can expect about %.2f x T transactions over %.0f ms from the machine alone\n", r.SlowPerComputeS, r.ThresholdMS)
	return nil
}
