package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

func benchSubmitCommand() *cli.Command {
	return &cli.Command{
		Name:  "submit",
		Usage: "submit a dataset of --entries files through `harvest submit` to a `harvest queue serve` process: time and memory",
		Description: "Creates a dataset of --entries empty files in a temporary directory (not timed), starts the\n" +
			"queue as its own process (`harvest queue serve`, a fresh database, the Unix socket), and runs\n" +
			"`harvest submit DIR -- true` as another process, the way a user does. Reports the submission's\n" +
			"wall time (the CLI process, from start to exit: listing, storing, answer), the peak resident\n" +
			"memory of the queue process (VmHWM) and of the CLI, and the queue's write transactions (how\n" +
			"long the submission held the write lock that every pull and result waits for: the longest, and\n" +
			"how many over 5 ms, as the queue logs them when it stops), and checks that the job holds every\n" +
			"entry.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "entries", Value: 1_000_000, Usage: "dataset entries (tasks)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: runBenchSubmit,
	}
}

// SubmitBench is the result of `harvest bench submit`.
type SubmitBench struct {
	Entries       int     `json:"entries"`
	SubmitS       float64 `json:"submit_s"`
	QueuePeakMB   float64 `json:"queue_peak_mb"`
	CLIPeakMB     float64 `json:"cli_peak_mb"`
	CreateS       float64 `json:"create_dataset_s"`
	TasksInTheJob int     `json:"tasks_in_the_job"`
	// The queue process's write transactions, from its start to its stop
	// (the submission's, and a few of the queue's own).
	WriteLock writeLockLine `json:"write_lock"`
}

// writeLockLine is the line the queue logs as it closes (queue.Queue.Close).
type writeLockLine struct {
	Transactions int64   `json:"transactions"`
	LockSeconds  float64 `json:"lock_seconds"`
	LongestMS    float64 `json:"longest_ms"`
	LongestIn    string  `json:"longest_in"`
	Over5ms      int64   `json:"over_5ms"`
}

func runBenchSubmit(c *cli.Context) error {
	fail := func(err error) error { return cli.Exit(fmt.Sprintf("harvest bench submit: %v", err), 1) }
	n := c.Int("entries")
	if n < 1 {
		return cli.Exit("harvest bench submit: --entries must be positive", 2)
	}
	bin, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	dir, err := os.MkdirTemp("", "harvest-bench-submit-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	data, ds := filepath.Join(dir, "data"), filepath.Join(dir, "data", "ds")
	if err := os.MkdirAll(ds, 0o755); err != nil {
		return fail(err)
	}
	start := time.Now()
	// Every entry is a hard link to an empty file (a new one every 60,000
	// links, under ext4's limit): a directory entry each without an inode
	// each, which makes a million entries minutes faster to create (the
	// queue lists names only).
	var one string
	for i := 0; i < n; i++ {
		if i%60_000 == 0 {
			one = filepath.Join(dir, fmt.Sprintf("entry%d", i))
			if err := os.WriteFile(one, nil, 0o644); err != nil {
				return fail(err)
			}
		}
		if err := os.Link(one, filepath.Join(ds, fmt.Sprintf("f%07d", i))); err != nil {
			return fail(err)
		}
	}
	r := SubmitBench{Entries: n, CreateS: time.Since(start).Seconds()}

	sock := filepath.Join(dir, "q.sock")
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	qcmd := exec.CommandContext(ctx, bin, "queue", "serve", "--db", filepath.Join(dir, "q.db"), "--socket", sock,
		"--allowed-root", data, "--outputs-root", filepath.Join(data, "out"), "--log-level", "info", "--log-json")
	var qlog strings.Builder // shown if anything fails; its last line has the write-lock figures
	qcmd.Stderr = &qlog
	fail = func(err error) error {
		return cli.Exit(fmt.Sprintf("harvest bench submit: %v\nthe queue's log:\n%s", err, qlog.String()), 1)
	}
	qcmd.Cancel = func() error { return qcmd.Process.Signal(syscall.SIGTERM) }
	if err := qcmd.Start(); err != nil {
		return fail(err)
	}
	defer qcmd.Wait()
	defer cancel()
	ccfg := client.DefaultConfig()
	ccfg.URL, ccfg.RetryFor = "unix://"+sock, 0
	cl, err := client.New(ccfg)
	if err != nil {
		return fail(err)
	}
	if err := waitForQueue(ctx, cl); err != nil {
		return fail(err)
	}

	scmd := exec.CommandContext(ctx, bin, "submit", ds, "--queue", "unix://"+sock, "--json", "--", "true")
	var out strings.Builder
	scmd.Stdout, scmd.Stderr = &out, c.App.ErrWriter
	start = time.Now()
	if err := scmd.Run(); err != nil {
		return fail(fmt.Errorf("harvest submit: %w", err))
	}
	r.SubmitS = time.Since(start).Seconds()
	if ru, ok := scmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.CLIPeakMB = float64(ru.Maxrss) / 1024
	}
	if r.QueuePeakMB, err = peakRSSMB(qcmd.Process.Pid); err != nil {
		return fail(err)
	}
	var j api.Job
	if err := json.Unmarshal([]byte(out.String()), &j); err != nil {
		return fail(fmt.Errorf("harvest submit printed %q: %w", out.String(), err))
	}
	got, err := cl.Job(ctx, j.ID)
	if err != nil {
		return fail(err)
	}
	r.TasksInTheJob = got.Tasks.Total
	if got.Tasks.Total != n || got.State != api.JobWaiting {
		return fail(fmt.Errorf("the job holds %d tasks (%s), want %d waiting", got.Tasks.Total, got.State, n))
	}
	cancel() // SIGTERM: the queue logs its write-lock figures as it closes
	qcmd.Wait()
	if r.WriteLock, err = writeLockFromLog(qlog.String()); err != nil {
		return fail(err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, r)
	}
	fmt.Fprintf(c.App.Writer, "submitted %d entries through harvest submit in %.2f s (dataset created in %.1f s, not counted)\n", n, r.SubmitS, r.CreateS)
	fmt.Fprintf(c.App.Writer, "peak memory: queue process %.0f MB, CLI %.0f MB\n", r.QueuePeakMB, r.CLIPeakMB)
	w := r.WriteLock
	fmt.Fprintf(c.App.Writer, "queue write transactions (every pull and result waits behind them): %d, %.2f s in all, longest %.2f ms (%s), %d over 5 ms\n",
		w.Transactions, w.LockSeconds, w.LongestMS, strings.TrimPrefix(w.LongestIn, "store.(*Store)."), w.Over5ms)
	return nil
}

// writeLockFromLog reads the figures the queue logs at its close (JSON
// lines, queue.Queue.Close).
func writeLockFromLog(log string) (writeLockLine, error) {
	for _, l := range strings.Split(log, "\n") {
		var e struct {
			Msg string `json:"msg"`
			writeLockLine
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "write lock at close" {
			return e.writeLockLine, nil
		}
	}
	return writeLockLine{}, errors.New("the queue did not log its write-lock figures when it stopped")
}

// waitForQueue waits until the queue answers (it is starting).
func waitForQueue(ctx context.Context, cl *client.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := cl.Whoami(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the queue did not start: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// peakRSSMB reads a process's peak resident set size (VmHWM).
func peakRSSMB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}
