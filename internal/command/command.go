// Package command runs the batch system's command-line clients for the
// adapters (squeue, sbatch, condor_q...). Each command runs in its own
// process group, so a timeout kills the wrapper scripts' children too; its
// output is capped, and can be handed to a parser while it is read; and the
// error says what happened to the process, which is what tells "nothing
// was done" from "something may have been done".
package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultMaxOutput is the cap on a command's standard output when
// Spec.MaxOutput is 0: 256 MiB, about 3 million squeue lines.
const DefaultMaxOutput = 256 << 20

// maxStderr is how much of the standard error is kept: error messages
// are short, and the rest cannot change the outcome.
const maxStderr = 64 << 10

// defaultWaitDelay is how long the pipes may stay open after the command
// exited or was killed (a child that inherited them).
const defaultWaitDelay = time.Second

// Spec is one command to run.
type Spec struct {
	Path  string
	Args  []string
	Env   []string // nil: the parent's environment
	Stdin []byte   // nil: no input
	// Stdout, when set, reads the standard output while the command runs
	// (to EOF); an error from it stops the command (its process group is
	// killed) and Run returns that error. When nil, the output is returned
	// in Result.Stdout.
	Stdout func(io.Reader) error
	// MaxOutput caps the standard output in bytes; past it the command is
	// killed and Run returns an error wrapping ErrOutputTooLarge. 0 =
	// DefaultMaxOutput.
	MaxOutput int64
	// WaitDelay bounds the wait for the pipes to close once the command
	// exited or was killed. 0 = one second.
	WaitDelay time.Duration
}

// Result is what a finished command left.
type Result struct {
	Stdout []byte // the output, when Spec.Stdout is nil
	Stderr []byte // at most the first 64 KiB
	// ExitCode is the exit status, -1 when the command did not exit by
	// itself (killed by a signal, or not run).
	ExitCode int
	// Signal is the signal that killed the command, 0 if none.
	Signal syscall.Signal
}

var (
	// ErrStart: the command could not be started (missing binary,
	// permissions). Nothing ran.
	ErrStart = errors.New("command could not be started")
	// ErrOutputTooLarge: the output went past the cap; the command was
	// killed.
	ErrOutputTooLarge = errors.New("command output over the cap")
	// ErrLeftover: the command exited (Result.ExitCode says how) but a
	// process it started kept its output open past the wait delay; that
	// process group was killed. The output read up to the exit is there.
	ErrLeftover = errors.New("command exited but left a process holding its output")
)

// ExitError is a command that ran and exited non-zero, or was killed by a
// signal that Run did not send.
type ExitError struct {
	Code   int            // -1 when killed by a signal
	Signal syscall.Signal // 0 when it exited
	Stderr string
}

func (e *ExitError) Error() string {
	msg := Excerpt(e.Stderr, 200)
	if e.Signal != 0 {
		return fmt.Sprintf("killed by signal %s: %s", e.Signal, msg)
	}
	return fmt.Sprintf("exit status %d: %s", e.Code, msg)
}

// Excerpt returns s on one line (newlines and tabs as spaces, runs of
// spaces collapsed), cut to about n bytes: short enough for an error
// message or a log line, whatever a command printed.
func Excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
			cut--
		}
		return s[:cut] + "..."
	}
	return s
}

// Run runs one command until it exits, ctx is done, or its output is
// refused. The error is nil when the command exited 0 and its output was
// read (and accepted by Spec.Stdout); otherwise it is, first match wins:
//
//   - an error wrapping ErrStart: nothing ran;
//   - Spec.Stdout's error, or one wrapping ErrOutputTooLarge: the output
//     was refused and the command killed;
//   - an error wrapping ctx.Err(): ctx ended first and the command's
//     process group was killed;
//   - *ExitError: it exited non-zero or a signal killed it;
//   - an error wrapping ErrLeftover: it exited 0 but a child held its
//     output open (the group was killed; the output is there).
func Run(ctx context.Context, s Spec) (Result, error) {
	res := Result{ExitCode: -1}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("%s: %w: %w", s.Path, ErrStart, err)
	}
	cmd := exec.CommandContext(ctx, s.Path, s.Args...)
	cmd.Env = s.Env
	if s.Stdin != nil {
		cmd.Stdin = bytes.NewReader(s.Stdin)
	}
	g := &group{}
	// A process group of its own: a timeout then kills what a wrapper
	// script started, not only the script.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = g.kill
	cmd.WaitDelay = s.WaitDelay
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = defaultWaitDelay
	}
	limit := s.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	var stderr headBuffer
	stderr.max = maxStderr
	cmd.Stderr = &stderr

	var (
		out       bytes.Buffer
		pr        *io.PipeReader
		pw        *io.PipeWriter
		parseDone chan error
	)
	cw := &capWriter{limit: limit, over: g.stop}
	if s.Stdout == nil {
		cw.w = &out
	} else {
		pr, pw = io.Pipe()
		cw.w = pw
		parseDone = make(chan error, 1)
		go func() {
			err := s.Stdout(pr)
			if err != nil {
				g.stop()
				pr.CloseWithError(err) // the command's further output has nowhere to go
			} else {
				_, _ = io.Copy(io.Discard, pr) // a parser that stopped early: let the command finish
			}
			parseDone <- err
		}()
	}
	cmd.Stdout = cw

	if err := cmd.Start(); err != nil {
		if pw != nil {
			pw.Close()
			<-parseDone
		}
		return res, fmt.Errorf("%s: %w: %v", s.Path, ErrStart, err)
	}
	g.started(cmd.Process.Pid)
	runErr := cmd.Wait()
	refused := g.exited() // the output was refused before the command ended
	leftover := errors.Is(runErr, exec.ErrWaitDelay)
	if leftover {
		// Exited, but a process it started kept the pipes open: kill it,
		// whatever else happened (a stop of the agent too: ctx ending
		// after the command exited kills nothing by itself). The group is
		// still held by that process, so its id is not reused.
		g.killLeftover()
	}
	var parseErr error
	if pw != nil {
		pw.Close()
		parseErr = <-parseDone
	}
	res.Stdout, res.Stderr = out.Bytes(), stderr.Bytes()
	if st := cmd.ProcessState; st != nil {
		res.ExitCode = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = ws.Signal()
		}
	}
	switch {
	case cw.exceeded():
		return res, fmt.Errorf("%s: %w: more than %d bytes", s.Path, ErrOutputTooLarge, limit)
	case parseErr != nil && refused:
		return res, parseErr
	case ctx.Err() != nil && (runErr != nil || parseErr != nil):
		return res, fmt.Errorf("%s: killed when %w", s.Path, ctx.Err())
	case res.Signal != 0 || res.ExitCode > 0:
		return res, &ExitError{Code: res.ExitCode, Signal: res.Signal, Stderr: string(res.Stderr)}
	case leftover:
		if parseErr != nil {
			return res, parseErr
		}
		return res, fmt.Errorf("%s: %w (exit status %d)", s.Path, ErrLeftover, res.ExitCode)
	case parseErr != nil:
		return res, parseErr
	case runErr != nil:
		return res, fmt.Errorf("%s: %w", s.Path, runErr)
	}
	return res, nil
}

// group is the command's process group, killed on a timeout or when its
// output is refused.
type group struct {
	mu      sync.Mutex
	pid     int
	pending bool // stop was asked before the process started
	stopped bool // the output was refused
	done    bool // the command was waited for: its id may be reused
}

func (g *group) started(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pid = pid
	if g.pending {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// exited marks the command as waited for and reports whether its output
// was refused before.
func (g *group) exited() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	return g.stopped
}

// kill kills the whole group (exec.Cmd.Cancel).
func (g *group) kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.done:
		return os.ErrProcessDone
	case g.pid == 0:
		g.pending = true
		return nil
	}
	return signalGroup(g.pid)
}

// killLeftover kills what is left of the group after the command exited.
func (g *group) killLeftover() {
	g.mu.Lock()
	defer g.mu.Unlock()
	_ = signalGroup(g.pid)
}

func signalGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return nil
}

// stop kills the group because its output was refused.
func (g *group) stop() {
	g.mu.Lock()
	if !g.done {
		g.stopped = true
	}
	g.mu.Unlock()
	_ = g.kill()
}

// capWriter passes at most limit bytes on, then refuses the rest and
// calls over once.
type capWriter struct {
	w     io.Writer
	limit int64
	over  func()

	mu   sync.Mutex
	n    int64
	full bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.full {
		c.mu.Unlock()
		return 0, ErrOutputTooLarge
	}
	if c.n+int64(len(p)) > c.limit {
		c.full = true
		c.mu.Unlock()
		c.over()
		return 0, ErrOutputTooLarge
	}
	c.n += int64(len(p))
	c.mu.Unlock()
	return c.w.Write(p)
}

func (c *capWriter) exceeded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.full
}

// headBuffer keeps the first max bytes written and drops the rest. (Not
// an embedded bytes.Buffer: its ReadFrom would bypass Write.)
type headBuffer struct {
	buf bytes.Buffer
	max int
}

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := h.max - h.buf.Len(); room > 0 {
		h.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (h *headBuffer) Bytes() []byte { return h.buf.Bytes() }

// HeadMax is how much of a short answer (sbatch's, condor_submit's) Head
// keeps.
const HeadMax = 4 << 10

// Head keeps the first HeadMax bytes of an answer and counts the rest,
// reading it to the end: a command that submits is not stopped for a
// long answer (it may have submitted), and a 50 MB answer is not held.
// Its Consume is a Spec.Stdout.
type Head struct {
	buf   bytes.Buffer
	total int64
}

// Consume reads r to its end.
func (h *Head) Consume(r io.Reader) error {
	var chunk [32 << 10]byte
	for {
		n, err := r.Read(chunk[:])
		h.total += int64(n)
		if room := HeadMax - h.buf.Len(); room > 0 {
			h.buf.Write(chunk[:min(n, room)])
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Bytes is the head kept.
func (h *Head) Bytes() []byte { return h.buf.Bytes() }

// Cut reports whether the answer was longer than the head kept.
func (h *Head) Cut() bool { return h.total > int64(h.buf.Len()) }

// Total is the answer's length in bytes.
func (h *Head) Total() int64 { return h.total }
