package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// serveSocket serves e's queue on a real Unix socket and returns its URL.
func serveSocket(t *testing.T, e *queuetest.Env) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hq") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "queue.sock")
	l, err := httpapi.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- httpapi.New(e.Q, httpapi.DefaultConfig()).Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	return "unix://" + sock
}

func socketClient(t *testing.T, url, token string) *client.Client {
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Token, cfg.RetryFor = url, token, 0
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestUnixSocketIdentity(t *testing.T) {
	const uid = 4242
	e := queuetest.New(t, func(c *queue.Config) {
		c.LookupUser = func(u uint32) (string, error) {
			if u == uid {
				return "carol", nil
			}
			return "", fmt.Errorf("user: unknown userid %d", u)
		}
	})
	url := serveSocket(t, e)
	ctx := context.Background()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test connects as root and as another uid")
	}

	t.Run("root on the socket is admin without a token", func(t *testing.T) {
		w, err := socketClient(t, url, "").Whoami(ctx)
		if err != nil || w.User != "root" || w.Role != api.RoleAdmin || w.Via != "socket" {
			t.Fatalf("whoami: %+v %v", w, err)
		}
		if _, err := socketClient(t, url, "").SetNodes(ctx, api.NodesSettings{MinNodes: queuetest.Ptr(2), MaxNodes: queuetest.Ptr(8)}); err != nil {
			t.Fatalf("root cannot set nodes over the socket: %v", err)
		}
		if min, max, _ := e.Q.NodeLimits(ctx); min != 2 || max != 8 {
			t.Fatalf("node limits %d %d", min, max)
		}
	})

	t.Run("another uid is identified by the kernel and cannot claim a token's identity", func(t *testing.T) {
		bin := copyTestBinary(t)
		for _, token := range []string{"", e.Tokens["admin"]} {
			cmd := exec.Command(bin, "-test.run=^$")
			cmd.Env = []string{"HARVEST_QUEUE_TEST_CHILD=whoami", "HQ_URL=" + url, "HQ_TOKEN=" + token}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
			out, err := cmd.Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("child: %v: %s", err, ee.Stderr)
				}
				t.Fatal(err)
			}
			var w api.Whoami
			if err := json.Unmarshal(out, &w); err != nil {
				t.Fatalf("child output %q: %v", out, err)
			}
			if w.User != "carol" || w.Role != api.RoleUser || w.Via != "socket" {
				t.Fatalf("uid %d with token %v is %+v, want carol/user/socket", uid, token != "", w)
			}
		}
	})

	t.Run("a uid without a user name is refused", func(t *testing.T) {
		// Only root and uid 4242 can connect here, so exercise the refusal directly.
		_, err := e.Q.Identify(ctx, queue.Credentials{Socket: true, UID: 4243})
		if !errors.Is(err, api.ErrForbidden) {
			t.Fatalf("got %v, want api.ErrForbidden", err)
		}
	})
}

// copyTestBinary copies the test binary where another uid can run it.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hqbin")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(dir, "queue.test")
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return dst
}

// The socket is not made in a directory another user could replace it
// in (nor is the directory made beneath one): there they could swap it
// for a link between its bind and its chmod 0666, or for their own
// socket later.
func TestListenUnixRefusesADirectoryOthersControl(t *testing.T) {
	dir, err := os.MkdirTemp("", "hq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	for _, sock := range []string{filepath.Join(dir, "queue.sock"), filepath.Join(dir, "run", "queue.sock")} {
		l, err := httpapi.ListenUnix(sock)
		if err == nil {
			l.Close()
			t.Errorf("%s: listening in a directory anyone may write", sock)
		} else if want := "writable by others (mode 0777) without the sticky bit"; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", sock, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "run")); err == nil {
		t.Error("the socket's directory was made")
	}
	// Sticky, as /tmp: the socket is ours and nobody else may replace it.
	os.Chmod(dir, 0o777|os.ModeSticky)
	l, err := httpapi.ListenUnix(filepath.Join(dir, "run", "queue.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}
