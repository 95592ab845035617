package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/internal/command"
)

// result is one finished command.
type result struct {
	stdout, stderr []byte
	// exit is the exit status, -1 when the command did not exit by itself.
	exit int
}

// runFunc runs one command. The real one is the adapter's execRun; tests
// use a fake. When parse is set, it reads the standard output as it comes
// (result.stdout is then empty) and its error is returned as is. runFunc
// returns a *cmdError when the command ran and failed, an error wrapping
// context.DeadlineExceeded when it timed out, one wrapping errStart when
// it could not be started, one wrapping command.ErrOutputTooLarge when its
// output went past the cap, and one wrapping command.ErrLeftover when it
// exited but a process it started held its output open.
type runFunc func(ctx context.Context, name string, args []string, env []string, stdin []byte, parse func(io.Reader) error) (result, error)

// cmdError is a command that ran and exited non-zero or was killed by a
// signal it was not sent by the adapter.
type cmdError struct {
	code   int            // -1 when killed by a signal
	signal syscall.Signal // 0 when it exited
	stderr string
}

func (e *cmdError) Error() string {
	if e.signal != 0 {
		return fmt.Sprintf("killed by signal %s: %s", e.signal, command.Excerpt(e.stderr, 200))
	}
	return fmt.Sprintf("exit status %d: %s", e.code, command.Excerpt(e.stderr, 200))
}

// errStart marks a command that could not be started (missing binary).
var errStart = errors.New("cannot start command")

// execRun runs one command for real: in its own process group (a timeout
// kills what a wrapper script started too), with its output capped at
// Config.MaxOutput (see internal/command).
func (a *Adapter) execRun(ctx context.Context, name string, args []string, env []string, stdin []byte, parse func(io.Reader) error) (result, error) {
	res, err := command.Run(ctx, command.Spec{Path: name, Args: args, Env: env, Stdin: stdin, Stdout: parse, MaxOutput: a.cfg.MaxOutput})
	r := result{stdout: res.Stdout, stderr: res.Stderr, exit: res.ExitCode}
	var ee *command.ExitError
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, command.ErrStart):
		return r, fmt.Errorf("%w %s: %v", errStart, name, err)
	case errors.As(err, &ee):
		return r, &cmdError{code: ee.Code, signal: ee.Signal, stderr: ee.Stderr}
	}
	return r, err
}

// unreachableMarkers are what SLURM clients print when slurmctld cannot
// be asked (22.05).
var unreachableMarkers = []string{
	"Unable to contact slurm controller",
	"Socket timed out on send/recv operation",
	"Zero Bytes were transmitted or received",
	"Connection refused",
	"Communication connection failure",
	"slurm_persist_conn_open",
}

// environ builds the environment of every SLURM command: the agent's own,
// without the variables that change what SLURM clients print or submit
// (SQUEUE_FORMAT, SBATCH_PARTITION, a SLURM_JOB_ID inherited from a job
// the agent might run in...), plus SLURM_CONF and the extras.
func (a *Adapter) environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "SLURM_CONF" && a.cfg.SlurmConf == "" {
			env = append(env, kv)
			continue
		}
		if strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "SQUEUE_") || strings.HasPrefix(k, "SINFO_") ||
			strings.HasPrefix(k, "SBATCH_") || strings.HasPrefix(k, "SCANCEL_") || strings.HasPrefix(k, "SCONTROL_") {
			continue
		}
		env = append(env, kv)
	}
	if a.cfg.SlurmConf != "" {
		env = append(env, "SLURM_CONF="+a.cfg.SlurmConf)
	}
	return append(env, extra...)
}

// query runs a read-only command. Every failure to get an answer wraps
// adapters.ErrUnreachable: a timeout, a missing binary, or the
// controller-down messages. Other non-zero exits are plain errors (a
// misconfiguration, such as an unknown partition) and are returned as is.
func (a *Adapter) query(ctx context.Context, name string, args []string, extraEnv ...string) ([]byte, error) {
	return a.queryParse(ctx, name, args, nil, extraEnv...)
}

// queryParse is query with the output handed to parse as it is read (nil:
// returned). A parse error is returned as is, wrapped with the command
// line.
func (a *Adapter) queryParse(ctx context.Context, name string, args []string, parse func(io.Reader) error, extraEnv ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	res, err := a.run(ctx, name, args, a.environ(extraEnv...), nil, parse)
	if err == nil || (errors.Is(err, command.ErrLeftover) && res.exit == 0) {
		// A process the command left behind held the pipe open, but the
		// command itself exited 0 and its whole answer was read.
		return res.stdout, nil
	}
	cmdline := name + " " + strings.Join(args, " ")
	var ce *cmdError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%s: no answer within %s: %w", cmdline, a.cfg.Timeout, adapters.ErrUnreachable)
	case errors.Is(err, context.Canceled):
		return nil, fmt.Errorf("%s: %w", cmdline, err)
	case errors.Is(err, command.ErrOutputTooLarge):
		return nil, fmt.Errorf("%s: %w; raise max_output_mb if the cluster is that large", cmdline, err)
	case errors.Is(err, ErrParse):
		return nil, fmt.Errorf("%s: %w", cmdline, err)
	case errors.As(err, &ce):
		if bytesHasAny(res.stderr, unreachableMarkers...) || bytesHasAny(res.stdout, unreachableMarkers...) {
			return nil, fmt.Errorf("%s: %s: %w", cmdline, firstErrorLine(res.stderr), adapters.ErrUnreachable)
		}
		return nil, fmt.Errorf("%s: %w", cmdline, err)
	default:
		return nil, fmt.Errorf("%s: %v: %w", cmdline, err, adapters.ErrUnreachable)
	}
}

// lineLimit passes r on until it has given more than max lines, then
// fails with an ErrParse that names the option to raise: the parser stops,
// the command is killed, and what was kept is bounded by max (a 64 MiB
// answer is 3.3 million sinfo lines).
func lineLimit(r io.Reader, max int, cmd, what, option string) io.Reader {
	if max <= 0 {
		return r
	}
	return &lineLimiter{r: r, left: max, cmd: cmd, what: what, option: option, max: max}
}

type lineLimiter struct {
	r                 io.Reader
	left, max         int
	cmd, what, option string
}

func (l *lineLimiter) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.left -= bytes.Count(p[:n], []byte{'\n'})
	if l.left < 0 {
		return 0, parseErr("%s listed more than %d %s, more than any real cluster this agent was set up for; raise the adapter's %s if the cluster is that large", l.cmd, l.max, l.what, l.option)
	}
	return n, err
}
