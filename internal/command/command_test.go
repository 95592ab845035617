package command

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sh runs a shell snippet as the command.
func sh(script string) Spec {
	return Spec{Path: "/bin/sh", Args: []string{"-c", script}}
}

// waitGone waits until process pid has exited (a pidfd becomes readable),
// at most d.
func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // already reaped
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(d/time.Millisecond))
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	if n == 0 {
		t.Fatalf("process %d still runs %s later", pid, d)
	}
}

// childPid reads the pid a script wrote to file.
func childPid(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file %q", b)
	}
	return pid
}

func TestATimeoutKillsTheWholeProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	// The child does not hold the output: only the group kill reaches it.
	s := sh(`sleep 60 >/dev/null 2>&1 & echo $! > ` + pidFile + `; wait`)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, s)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	waitGone(t, childPid(t, pidFile), 5*time.Second)
}

func TestAChildHoldingTheOutputAfterExitIsKilledAndReported(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	s := sh(`echo 42; sleep 60 & echo $! > ` + pidFile + `; exit 0`)
	s.WaitDelay = 200 * time.Millisecond
	res, err := Run(context.Background(), s)
	if !errors.Is(err, ErrLeftover) {
		t.Fatalf("err = %v, want ErrLeftover", err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != "42\n" {
		t.Errorf("result %+v", res)
	}
	waitGone(t, childPid(t, pidFile), 5*time.Second)
}

func TestResults(t *testing.T) {
	tests := []struct {
		name  string
		spec  Spec
		check func(t *testing.T, res Result, err error)
	}{
		{"success", sh(`echo hello; echo oops >&2`), func(t *testing.T, res Result, err error) {
			if err != nil || string(res.Stdout) != "hello\n" || string(res.Stderr) != "oops\n" || res.ExitCode != 0 {
				t.Errorf("%+v, %v", res, err)
			}
		}},
		{"a non-zero exit is an ExitError with its stderr", sh(`echo 'sbatch: error: no' >&2; exit 3`), func(t *testing.T, res Result, err error) {
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != 3 || ee.Signal != 0 || !strings.Contains(ee.Stderr, "sbatch: error: no") {
				t.Errorf("err = %#v", err)
			}
		}},
		{"a signal is told from an exit", sh(`kill -TERM $$`), func(t *testing.T, res Result, err error) {
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Signal != syscall.SIGTERM || ee.Code != -1 || res.Signal != syscall.SIGTERM {
				t.Errorf("err = %v, res %+v", err, res)
			}
		}},
		{"a missing binary did not start", Spec{Path: "/nonexistent/squeue"}, func(t *testing.T, res Result, err error) {
			if !errors.Is(err, ErrStart) {
				t.Errorf("err = %v", err)
			}
		}},
		{"output past the cap is refused and the command killed", Spec{Path: "yes", MaxOutput: 1 << 20}, func(t *testing.T, res Result, err error) {
			if !errors.Is(err, ErrOutputTooLarge) || len(res.Stdout) > 1<<20 {
				t.Errorf("err = %v, %d bytes kept", err, len(res.Stdout))
			}
		}},
		{"the stdin is passed", Spec{Path: "cat", Stdin: []byte("script\n")}, func(t *testing.T, res Result, err error) {
			if err != nil || string(res.Stdout) != "script\n" {
				t.Errorf("%q, %v", res.Stdout, err)
			}
		}},
		{"stderr is kept short", sh(`head -c 200000 /dev/zero >&2`), func(t *testing.T, res Result, err error) {
			if err != nil || len(res.Stderr) != maxStderr {
				t.Errorf("%d bytes of stderr, %v", len(res.Stderr), err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), tc.spec)
			tc.check(t, res, err)
		})
	}
}

func TestStreamedOutput(t *testing.T) {
	errBad := errors.New("bad line")
	countLines := func(n *int) func(io.Reader) error {
		return func(r io.Reader) error {
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				*n++
			}
			return sc.Err()
		}
	}
	t.Run("the parser reads everything", func(t *testing.T) {
		n := 0
		s := sh(`seq 1 100000`)
		s.Stdout = countLines(&n)
		res, err := Run(context.Background(), s)
		if err != nil || n != 100000 || len(res.Stdout) != 0 {
			t.Errorf("%d lines, %d bytes kept, %v", n, len(res.Stdout), err)
		}
	})
	t.Run("a parser error stops the command and is returned", func(t *testing.T) {
		s := Spec{Path: "yes"}
		s.Stdout = func(r io.Reader) error {
			_, _ = r.Read(make([]byte, 10))
			return errBad
		}
		done := make(chan error, 1)
		go func() { _, err := Run(context.Background(), s); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, errBad) {
				t.Errorf("err = %v, want the parser's", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the command was not stopped")
		}
	})
	t.Run("the cap applies to a streamed output", func(t *testing.T) {
		n := 0
		s := Spec{Path: "yes", MaxOutput: 1 << 20}
		s.Stdout = countLines(&n)
		_, err := Run(context.Background(), s)
		if !errors.Is(err, ErrOutputTooLarge) || n > 1<<19 {
			t.Errorf("err = %v after %d lines", err, n)
		}
	})
	t.Run("a failed command's exit wins over the parse of its partial output", func(t *testing.T) {
		s := sh(`printf 'partial'; echo 'Unable to contact slurm controller' >&2; exit 1`)
		s.Stdout = func(r io.Reader) error {
			b, _ := io.ReadAll(r)
			if !strings.HasSuffix(string(b), "\n") {
				return errBad
			}
			return nil
		}
		_, err := Run(context.Background(), s)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != 1 {
			t.Errorf("err = %v, want the exit", err)
		}
	})
	t.Run("a timeout wins over the parse of the output it cut", func(t *testing.T) {
		s := sh(`printf 'partial'; sleep 30`)
		s.Stdout = func(r io.Reader) error {
			_, _ = io.ReadAll(r)
			return errBad
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := Run(ctx, s)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want DeadlineExceeded", err)
		}
	})
}

func TestExcerpt(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"one line", 80, "one line"},
		{"  many\n\tlines \n\n here ", 80, "many lines here"},
		{strings.Repeat("x", 100), 10, "xxxxxxxxxx..."},
		{"ééééé", 3, "é..."},
	}
	for _, tc := range tests {
		if got := Excerpt(tc.in, tc.n); got != tc.want {
			t.Errorf("Excerpt(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// Issue 35 item 10: stopping the agent (ctx ends) after the command
// exited while its child still holds the output left the child running:
// ctx ending after the exit kills nothing, and the leftover case was not
// reached. The group is killed then too.
func TestAStopAfterTheCommandExitedKillsTheChildHoldingItsOutput(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := sh(`sleep 60 & echo $! > ` + pidFile + `; echo $$; exit 0`)
	s.WaitDelay = 2 * time.Second
	s.Stdout = func(r io.Reader) error {
		line, err := bufio.NewReader(r).ReadString('\n')
		shell, perr := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || perr != nil {
			return errors.New("no shell pid")
		}
		// Stop only once the shell has exited and been reaped.
		waitGone(t, shell, 5*time.Second)
		for deadline := time.Now().Add(5 * time.Second); syscall.Kill(shell, 0) == nil; {
			if time.Now().After(deadline) {
				return errors.New("the shell was not reaped")
			}
			runtime.Gosched()
		}
		cancel() // the agent stops while the child holds the pipe
		return nil
	}
	_, err := Run(ctx, s)
	if err == nil {
		t.Error("Run after a stop with a leftover child: no error")
	}
	waitGone(t, childPid(t, pidFile), 5*time.Second)
}
