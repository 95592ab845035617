package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

// Exit codes of `harvest submit --wait` by the job's final state.
var waitExitCodes = map[string]int{
	api.JobDone: 0, api.JobDoneWarn: 3, api.JobFailed: 4, api.JobKilled: 5, api.JobErrorEW: 6,
}

func submitFlags() []cli.Flag {
	return append(clientFlags(),
		&cli.IntFlag{Name: "batch-size", Value: 1, Usage: "tasks per batch handed to a worker"},
		&cli.BoolFlag{Name: "batched", Usage: "run CMD once per batch: {inputs} stands for the batch's entries and {outputs} for their output directories, one argument each (at most 1000 per batch)"},
		&cli.Float64Flag{Name: "price", Value: 1, Usage: "your own importance weight for this job (> 0)"},
		&cli.IntFlag{Name: "cores", Value: 1, Usage: "cores per task"},
		&cli.IntFlag{Name: "max-attempts", Value: 3, Usage: "attempts per task before it fails for good"},
		&cli.DurationFlag{Name: "timeout", Usage: "per-task timeout (0: none)"},
		&cli.DurationFlag{Name: "expiry", Usage: "give up if the job has not started after this (default: the queue's, 7 days)"},
		&cli.StringFlag{Name: "output", Usage: "output `DIR` (default: a per-job directory chosen by the queue)"},
		&cli.StringFlag{Name: "name", Usage: "a name for the job"},
		&cli.BoolFlag{Name: "wait", Usage: "wait for the job, showing progress; the exit code is the job's result"},
		&cli.DurationFlag{Name: "poll", Value: 2 * time.Second, Usage: "progress poll period with --wait"},
		&cli.StringFlag{Name: "idempotency-key", Usage: "name this submission `KEY`: submitting again with the same KEY (after a lost connection or a crash) gets the same job, never a second (default: a new key per run; retries within a run reuse it)"},
	)
}

func submitCommand() *cli.Command {
	return &cli.Command{
		Name:      "submit",
		Usage:     "submit a dataset directory: each entry becomes a task running CMD",
		ArgsUsage: "DIR [flags] -- CMD ARGS...",
		Description: "Every entry of DIR (sub-directory or file, sorted, hidden ones skipped) becomes a task. CMD runs\n" +
			"without a shell; in its arguments {input} is the entry's path, {output} the task's output path\n" +
			"(output dir/<entry name>), {job} the job id and {task} the task id.\n\n" +
			"With --batched, CMD runs once per batch of --batch-size entries (for a program whose work per\n" +
			"entry is tiny): the argument {inputs} becomes the batch's entries and {outputs} their output\n" +
			"directories (made for it), one argument each, in the same order, as xargs would; if CMD fails,\n" +
			"every entry of its batch fails with its exit code. Example:\n" +
			"  harvest submit ./dataset --batched --batch-size 100 -- prog --out-dirs {outputs} -- {inputs}\n\n" +
			"A large dataset (a million entries) takes seconds to store: the queue's progress goes to\n" +
			"stderr, a lost connection is retried with the submission's idempotency key (the same job,\n" +
			"never a second), and the job appears whole or not at all.\n\n" +
			"With --wait a progress bar (done/failed/total, ETA) goes to stderr and the exit code is the\n" +
			"job's result: 0 DONE, 3 DONE_WARN, 4 FAILED, 5 KILLED, 6 ERROR_EW.\n\n" +
			"Example: harvest submit ./dataset --batch-size 4 -- prog {input} {output}",
		Flags:  submitFlags(),
		Action: withClient(runSubmit),
	}
}

// interspersed lets flags follow positional arguments (urfave/cli stops
// parsing flags at the first positional one, but the documented usage is
// `harvest submit DIR --batch-size 4 -- CMD`): it applies every flag found
// among the arguments before "--" to c, and returns the positional
// arguments and those after "--" (nil when there is no "--").
func interspersed(c *cli.Context) (pos, rest []string, err error) {
	args := c.Args().Slice()
	isBool := map[string]bool{}
	known := map[string]bool{}
	for _, f := range c.Command.Flags {
		_, b := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			known[n] = true
			isBool[n] = b
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return pos, append([]string{}, args[i+1:]...), nil
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			return nil, nil, fmt.Errorf("unknown flag %s", a)
		}
		if !hasVal {
			if isBool[name] {
				val = "true"
			} else {
				if i+1 >= len(args) {
					return nil, nil, fmt.Errorf("flag %s needs a value", a)
				}
				i++
				val = args[i]
			}
		}
		if err := c.Set(name, val); err != nil {
			return nil, nil, fmt.Errorf("flag %s: %w", a, err)
		}
	}
	return pos, nil, nil
}

func runSubmit(c *cli.Context, cl *client.Client, a args) error {
	pos, argv := a.pos, a.rest
	if len(pos) != 1 {
		return cli.Exit("harvest submit: usage: harvest submit DIR [flags] -- CMD ARGS...", 2)
	}
	if len(argv) == 0 {
		return cli.Exit("harvest submit: no command: put it after \"--\" (harvest submit DIR -- prog {input} {output})", 2)
	}
	abs, err := filepath.Abs(pos[0])
	if err != nil {
		return cli.Exit("harvest submit: "+err.Error(), 2)
	}
	// JSON would carry bad bytes as U+FFFD: the job would run another command.
	for i, x := range append([]string{c.String("name")}, argv...) {
		if !utf8.ValidString(x) {
			what := fmt.Sprintf("command argument %d", i-1)
			if i == 0 {
				what = "--name"
			}
			return cli.Exit(fmt.Sprintf("harvest submit: %s %q is not valid UTF-8", what, x), 2)
		}
	}
	switch batched := pilotproto.Batched(argv); {
	case c.Bool("batched") && !batched:
		return cli.Exit("harvest submit: --batched runs CMD once per batch with the batch's entries: put the argument {inputs} in CMD", 2)
	case !c.Bool("batched") && batched:
		return cli.Exit("harvest submit: {inputs} runs CMD once per batch with all its entries: say so with --batched (or use {input}, one task per entry)", 2)
	}
	price, cores, attempts := c.Float64("price"), c.Int("cores"), c.Int("max-attempts")
	spec := api.JobSpec{Dataset: abs, Command: argv, Name: c.String("name"), BatchSize: c.Int("batch-size"),
		Price: &price, Cores: &cores, MaxAttempts: &attempts}
	timeout := c.Duration("timeout")
	spec.TimeoutS, spec.ExpiryS = int64(timeout/time.Second), int64(c.Duration("expiry")/time.Second)
	if timeout > 0 && spec.TimeoutS == 0 {
		spec.TimeoutS = 1 // a sub-second timeout rounds up, not to "none"
	}
	if o := c.String("output"); o != "" {
		if spec.Output, err = filepath.Abs(o); err != nil {
			return cli.Exit("harvest submit: --output: "+err.Error(), 2)
		}
	}
	poll := c.Duration("poll")
	if poll <= 0 {
		return cli.Exit("harvest submit: --poll must be positive", 2)
	}
	ctx := c.Context
	key := c.String("idempotency-key")
	if key == "" {
		key = client.NewIdempotencyKey()
	}
	stored := newProgressOut(c.App.ErrWriter, time.Now)
	j, err := cl.SubmitWith(ctx, spec, client.SubmitOptions{IdempotencyKey: key, Progress: func(p api.SubmitProgress) {
		stored.show(submitProgressLine(p))
	}})
	stored.done()
	if err != nil {
		if api.StatusOf(api.CodeOf(err)) < 500 { // the queue refused it: a retry would be refused too
			return err
		}
		return fmt.Errorf("%w (to retry without risking a second job: --idempotency-key %s)", err, key)
	}
	if c.Bool("json") && !c.Bool("wait") {
		return printJSON(c.App.Writer, j)
	}
	fmt.Fprintf(c.App.Writer, "job %d submitted: %d tasks, output in %s\n", j.ID, j.Tasks.Total, oneLine(j.OutputDir, 0))
	if !c.Bool("wait") {
		return nil
	}
	final, err := waitJob(ctx, cl, j.ID, poll, c.App.ErrWriter, time.Now)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		printJSON(c.App.Writer, final)
	} else {
		fmt.Fprintf(c.App.Writer, "job %d %s: %d done, %d failed, %d killed of %d\n", final.ID, final.State,
			final.Tasks.Done, final.Tasks.Failed, final.Tasks.Killed, final.Tasks.Total)
		if final.Tasks.Failed > 0 {
			fmt.Fprintf(c.App.ErrWriter, "why they failed: harvest failures %d\n", final.ID)
		}
	}
	if code := waitExitCodes[final.State]; code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// submitProgressLine renders the queue's progress in storing a submission:
// "listing the dataset: 412000 entries" or "storing tasks: 300000/1000000".
func submitProgressLine(p api.SubmitProgress) string {
	if p.Phase == api.PhaseStoring {
		return fmt.Sprintf("storing tasks: %d/%d ", p.Stored, p.Entries)
	}
	return fmt.Sprintf("listing the dataset: %d entries ", p.Entries)
}

// waitJob polls a job until it is final, drawing the progress bar. now
// is the clock the ETA's rate is measured with.
func waitJob(ctx context.Context, cl *client.Client, id int64, poll time.Duration, w io.Writer, now func() time.Time) (api.Job, error) {
	est := newRateEstimator(etaTau)
	out := newProgressOut(w, now)
	for {
		j, err := cl.Job(ctx, id)
		if err != nil {
			out.done()
			return j, err
		}
		est.Observe(now(), j.Tasks.Done+j.Tasks.Failed+j.Tasks.Killed)
		out.show(progressLine(j, est))
		if api.JobFinal(j.State) {
			out.done()
			return j, nil
		}
		select {
		case <-ctx.Done():
			out.done()
			return j, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// progressOut shows progress lines on w. On a terminal each line is
// drawn over the last. On anything else (a file, a pipe, a batch job's
// log, where carriage returns made one line of a whole run: 400 KB for a
// 10,000-task --wait) each shown line is a line of its own, at most one
// per progressLogEvery, and done writes the last one if it was held back.
type progressOut struct {
	w       io.Writer
	tty     bool
	now     func() time.Time
	width   int       // of the longest line drawn, so a shorter one covers it
	printed time.Time // when the last line was written (not a terminal)
	held    string    // a line not written yet (not a terminal)
	drawn   bool
}

// progressLogEvery spaces the progress lines written to a file or pipe.
const progressLogEvery = 10 * time.Second

func newProgressOut(w io.Writer, now func() time.Time) *progressOut {
	return &progressOut{w: w, tty: isTerminal(w), now: now}
}

func (p *progressOut) show(line string) {
	if p.tty {
		p.width = max(p.width, len(line))
		fmt.Fprintf(p.w, "\r%-*s", p.width, line)
		p.drawn = true
		return
	}
	if t := p.now(); p.printed.IsZero() || t.Sub(p.printed) >= progressLogEvery {
		fmt.Fprintln(p.w, strings.TrimRight(line, " "))
		p.printed, p.held = t, ""
		return
	}
	p.held = line
}

// done ends the progress: the terminal's line is closed, a held line
// written.
func (p *progressOut) done() {
	if p.tty {
		if p.drawn {
			fmt.Fprintln(p.w)
			p.drawn = false
		}
		return
	}
	if p.held != "" {
		fmt.Fprintln(p.w, strings.TrimRight(p.held, " "))
		p.held = ""
	}
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progressLine renders
// "[#####.....] 50/100 done, 2 failed, 4 running  ETA 3m0s at 0.3 tasks/s  RUNNING".
// The ETA divides the tasks left by the smoothed completion rate.
func progressLine(j api.Job, est *rateEstimator) string {
	const width = 30
	t := j.Tasks
	fin := t.Done + t.Failed + t.Killed
	filled := 0
	if t.Total > 0 {
		filled = fin * width / t.Total
	}
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	eta := "ETA --"
	if left := t.Total - fin; left <= 0 {
		eta = ""
	} else if d, ok := est.ETA(left); ok {
		r, _ := est.Rate()
		eta = "ETA " + d.String() + " at " + rateString(r)
	}
	return fmt.Sprintf("[%s] %d/%d done, %d failed, %d running  %s  %s", bar, t.Done, t.Total, t.Failed, t.Running, eta, j.State)
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show one job in detail, or your jobs that are not finished",
		ArgsUsage: "[JOB]",
		Flags:     clientFlags(),
		Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
			pos := a.pos
			if len(pos) > 1 {
				return cli.Exit("harvest status: usage: harvest status [JOB] [--json]", 2)
			}
			if len(pos) == 0 {
				return listJobs(c, cl, true)
			}
			id, err := strconv.ParseInt(pos[0], 10, 64)
			if err != nil || id <= 0 {
				return cli.Exit(fmt.Sprintf("harvest status: %q is not a job id", pos[0]), 2)
			}
			j, err := cl.Job(c.Context, id)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, j)
			}
			printJob(c.App.Writer, j)
			return nil
		}),
	}
}

func printJob(w io.Writer, j api.Job) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("job", j.ID)
	if j.Name != "" {
		row("name", oneLine(j.Name, 0))
	}
	row("owner", j.Owner)
	row("state", j.State)
	row("tasks", fmt.Sprintf("%d total, %d waiting, %d running, %d done, %d failed, %d killed",
		j.Tasks.Total, j.Tasks.Waiting, j.Tasks.Running, j.Tasks.Done, j.Tasks.Failed, j.Tasks.Killed))
	if len(j.Sites) > 0 {
		var parts []string
		for _, s := range j.Sites {
			p := fmt.Sprintf("%s %d done", s.Site, s.Done)
			if s.Failed > 0 {
				p += fmt.Sprintf(" (%d failed attempts)", s.Failed)
			}
			parts = append(parts, p)
		}
		row("ran at", strings.Join(parts, ", "))
	}
	if failedAttempts(j) > 0 {
		row("failures", fmt.Sprintf("%d failed attempts: harvest failures %d", failedAttempts(j), j.ID))
	}
	row("dataset", oneLine(j.Dataset, 0))
	row("output", oneLine(j.OutputDir, 0))
	row("command", oneLine(strings.Join(j.Command, " "), 0))
	row("batch size", j.BatchSize)
	row("price", j.Price)
	row("cores", j.Cores)
	row("max attempts", j.MaxAttempts)
	if j.TimeoutS > 0 {
		row("timeout", time.Duration(j.TimeoutS)*time.Second)
	}
	row("submitted", unixTime(j.SubmittedAt))
	if j.StartedAt > 0 {
		row("started", unixTime(j.StartedAt))
	}
	if j.FinishedAt > 0 {
		row("finished", unixTime(j.FinishedAt))
	} else {
		row("expires", unixTime(j.ExpiresAt))
	}
	tw.Flush()
}

// failedAttempts counts the job's failed and timed-out attempts (per
// site), or its failed tasks if that is more (expiries have no result).
func failedAttempts(j api.Job) int {
	n := 0
	for _, s := range j.Sites {
		n += s.Failed
	}
	return max(n, j.Tasks.Failed)
}

func unixTime(s int64) string {
	if s == 0 {
		return "-"
	}
	return time.Unix(s, 0).Local().Format("2006-01-02 15:04:05")
}

func jobsCommand() *cli.Command {
	return &cli.Command{
		Name:  "jobs",
		Usage: "list your jobs, newest first (admins: everybody's, or --user)",
		Flags: append(clientFlags(),
			&cli.StringFlag{Name: "state", Usage: "only jobs in this `STATE`"},
			&cli.StringFlag{Name: "user", Usage: "only this user's jobs (admins)"},
			&cli.IntFlag{Name: "limit", Value: 50, Usage: "jobs per page"},
			&cli.BoolFlag{Name: "all", Usage: "follow every page"},
		),
		Action: withClient(func(c *cli.Context, cl *client.Client, _ args) error { return listJobs(c, cl, false) }),
	}
}

func listJobs(c *cli.Context, cl *client.Client, activeOnly bool) error {
	if n := c.Int("limit"); n < 1 && !activeOnly {
		return cli.Exit(fmt.Sprintf("harvest jobs: --limit must be a positive number of jobs per page, got %d", n), 2)
	}
	queries := []client.ListOptions{{User: c.String("user"), State: c.String("state"), Limit: c.Int("limit")}}
	all := c.Bool("all")
	if activeOnly { // the two non-final states, every page
		queries = []client.ListOptions{{State: api.JobRunning}, {State: api.JobWaiting}}
		all = true
	}
	var jobs []api.Job
	for _, o := range queries {
		for {
			page, err := cl.Jobs(c.Context, o)
			if err != nil {
				return err
			}
			jobs = append(jobs, page.Jobs...)
			if !all || page.NextCursor == 0 {
				break
			}
			o.Cursor = page.NextCursor
		}
	}
	if c.Bool("json") {
		if jobs == nil {
			jobs = []api.Job{}
		}
		return printJSON(c.App.Writer, jobs)
	}
	if len(jobs) == 0 {
		fmt.Fprintln(c.App.Writer, "no jobs")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tOWNER\tSTATE\tTOTAL\tWAITING\tRUNNING\tDONE\tFAILED\tSUBMITTED\tNAME")
	for _, j := range jobs {
		t := j.Tasks
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", j.ID, j.Owner, j.State, t.Total, t.Waiting, t.Running, t.Done, t.Failed, unixTime(j.SubmittedAt), oneLine(j.Name, 60))
	}
	return tw.Flush()
}

func cancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel a job: waiting tasks never run, running ones are stopped",
		ArgsUsage: "JOB...",
		Flags:     clientFlags(),
		Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
			pos := a.pos
			if len(pos) == 0 {
				return cli.Exit("harvest cancel: usage: harvest cancel JOB... [--json]", 2)
			}
			var failed int
			for _, a := range pos {
				id, err := strconv.ParseInt(a, 10, 64)
				if err != nil || id <= 0 {
					fmt.Fprintf(c.App.ErrWriter, "harvest cancel: %q is not a job id\n", a)
					failed++
					continue
				}
				j, err := cl.Cancel(c.Context, id)
				if err != nil {
					fmt.Fprintf(c.App.ErrWriter, "harvest cancel: job %d: %v\n", id, err)
					failed++
					continue
				}
				if c.Bool("json") {
					printJSON(c.App.Writer, j)
				} else {
					fmt.Fprintf(c.App.Writer, "job %d %s (%d tasks killed)\n", j.ID, j.State, j.Tasks.Killed)
				}
			}
			if failed > 0 {
				return cli.Exit("", 1)
			}
			return nil
		}),
	}
}
