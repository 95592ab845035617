package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
)

// result is one finished command.
type result struct {
	stdout, stderr []byte
}

// runFunc runs one command. The real one is execRun; tests use a fake.
// It returns a *cmdError when the command ran and failed, an error
// wrapping context.DeadlineExceeded when it timed out, and any other error
// when it could not be started.
type runFunc func(ctx context.Context, name string, args []string, env []string, stdin []byte) (result, error)

// cmdError is a command that ran and exited non-zero.
type cmdError struct {
	code   int
	stderr string
}

func (e *cmdError) Error() string {
	return fmt.Sprintf("exit status %d: %s", e.code, strings.TrimSpace(e.stderr))
}

// errStart marks a command that could not be started (missing binary).
var errStart = errors.New("cannot start command")

func execRun(ctx context.Context, name string, args []string, env []string, stdin []byte) (result, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	// If the command leaves a child holding its pipes, do not wait for it
	// beyond the deadline.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	res := result{stdout: out.Bytes(), stderr: errb.Bytes()}
	if ctx.Err() != nil {
		return res, fmt.Errorf("%s: %w", name, ctx.Err())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &ee):
		return res, &cmdError{code: ee.ExitCode(), stderr: errb.String()}
	default:
		return res, fmt.Errorf("%w %s: %v", errStart, name, err)
	}
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
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	res, err := a.run(ctx, name, args, a.environ(extraEnv...), nil)
	if err == nil {
		return res.stdout, nil
	}
	cmdline := name + " " + strings.Join(args, " ")
	var ce *cmdError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%s: no answer within %s: %w", cmdline, a.cfg.Timeout, adapters.ErrUnreachable)
	case errors.Is(err, context.Canceled):
		return nil, fmt.Errorf("%s: %w", cmdline, err)
	case errors.As(err, &ce):
		if bytesHasAny(res.stderr, unreachableMarkers...) || bytesHasAny(res.stdout, unreachableMarkers...) {
			return nil, fmt.Errorf("%s: %s: %w", cmdline, firstLine(res.stderr), adapters.ErrUnreachable)
		}
		return nil, fmt.Errorf("%s: %w", cmdline, err)
	default:
		return nil, fmt.Errorf("%s: %v: %w", cmdline, err, adapters.ErrUnreachable)
	}
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return trunc(s)
}
