package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

// failuresCommand lists why a job's tasks failed: the answer to a job
// that ended DONE_WARN or FAILED, or one that keeps retrying.
func failuresCommand() *cli.Command {
	return &cli.Command{
		Name:      "failures",
		Usage:     "list a job's tasks that failed at least once, with their exit codes, errors and logs",
		ArgsUsage: "JOB",
		Description: "One line per task that failed, timed out or expired at least once: its entry, its state\n" +
			"now (WAITING, ASSIGNED or RUNNING: being retried; DONE: a retry succeeded; ERROR_E or\n" +
			"EXPIRED: no attempt left), its failed attempts, and its last failure: status, exit code,\n" +
			"where and when it ended, and the last line of its stderr. --tail prints the whole end of\n" +
			"stderr the worker sent (2 KiB by default) and the log file that holds all of it\n" +
			"(OUTPUT/.harvest/logs/TASK.ATTEMPT.err, on the cluster's shared file system).",
		Flags: append(clientFlags(),
			&cli.IntFlag{Name: "limit", Value: 50, Usage: "tasks per page"},
			&cli.Int64Flag{Name: "after", Usage: "start after this `TASK` id (the line a page ends with says which)"},
			&cli.BoolFlag{Name: "all", Usage: "follow every page"},
			&cli.BoolFlag{Name: "tail", Usage: "print each task's error tail and log file"},
		),
		Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
			if len(a.pos) != 1 {
				return cli.Exit("harvest failures: usage: harvest failures JOB [--tail] [--limit N] [--after TASK] [--all] [--json]", 2)
			}
			id, err := strconv.ParseInt(a.pos[0], 10, 64)
			if err != nil || id <= 0 {
				return cli.Exit(fmt.Sprintf("harvest failures: %q is not a job id", a.pos[0]), 2)
			}
			if c.Int("limit") < 1 || c.Int64("after") < 0 {
				return cli.Exit("harvest failures: --limit must be positive and --after not negative", 2)
			}
			var fs []api.Failure
			cursor := c.Int64("after")
			for {
				page, err := cl.Failures(c.Context, id, cursor, c.Int("limit"))
				if err != nil {
					return err
				}
				fs = append(fs, page.Failures...)
				cursor = page.NextCursor
				if !c.Bool("all") || cursor == 0 {
					break
				}
			}
			if c.Bool("json") { // the page's cursor too: more may follow
				if fs == nil {
					fs = []api.Failure{}
				}
				return printJSON(c.App.Writer, api.FailureList{Failures: fs, NextCursor: cursor})
			}
			printFailures(c.App.Writer, id, fs, c.Bool("tail"), cursor)
			return nil
		}),
	}
}

// printFailures writes the table (and with tail each task's error tail
// and log); more is the cursor of the next page (0: none).
func printFailures(w io.Writer, job int64, fs []api.Failure, tail bool, more int64) {
	if len(fs) == 0 {
		fmt.Fprintf(w, "job %d: no task has failed\n", job)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tENTRY\tSTATE\tFAILED\tLAST\tEXIT\tSITE\tWHEN\tERROR")
	for _, f := range fs {
		when := "-"
		if f.StartedAt > 0 {
			when = time.UnixMilli(f.StartedAt + f.DurationMS).Local().Format("01-02 15:04:05")
		}
		// The entry's index within its job: the task id (job << 32 |
		// index) is a huge number; --json has both.
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", f.Index, oneLine(f.Name, 40), f.State, f.Tries, f.Status, f.ExitCode,
			dash(f.Site), when, oneLine(lastLine(f.ErrorTail), 60))
	}
	tw.Flush()
	if tail {
		for _, f := range fs {
			fmt.Fprintf(w, "\n--- task %d (%s), attempt %d, %s", f.Index, oneLine(f.Name, 200), f.Attempt, f.Status)
			if f.Log != "" {
				fmt.Fprintf(w, ", log %s", f.Log)
			}
			fmt.Fprintln(w)
			if t := strings.TrimRight(f.ErrorTail, "\n"); t != "" {
				fmt.Fprintln(w, printable(t))
			} else {
				fmt.Fprintln(w, "(no stderr)")
			}
		}
	}
	if more > 0 {
		fmt.Fprintf(w, "more: harvest failures %d --after %d (or --all)\n", job, more)
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n\r\t ")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
