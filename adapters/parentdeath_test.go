package adapters_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-hpc/harvest/adapters"
)

// parentEnv makes the test binary act as an agent: it launches the plugin
// named by the variable, prints the plugin's pid and waits to be killed.
const parentEnv = "HARVEST_TEST_PLUGIN_PARENT"

// TestPluginParentHelper is the agent of TestAPluginExitsWhenItsAgentIsKilled
// (it does nothing in a normal run).
func TestPluginParentHelper(t *testing.T) {
	bin := os.Getenv(parentEnv)
	if bin == "" {
		return
	}
	l, err := adapters.Launch(exec.Command(bin), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("PLUGIN %d\n", l.Pid())
	select {} // until SIGKILL
}

// kill -9 of the agent must not leave its adapter plugin running forever,
// re-parented to init.
func TestAPluginExitsWhenItsAgentIsKilled(t *testing.T) {
	bin := buildPlugin(t)
	parent := exec.Command(os.Args[0], "-test.run=^TestPluginParentHelper$", "-test.count=1")
	parent.Env = append(os.Environ(), parentEnv+"="+bin)
	parent.Stderr = os.Stderr
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })

	pidc := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "PLUGIN "); ok {
				n, _ := strconv.Atoi(v)
				pidc <- n
				return
			}
		}
		pidc <- 0
	}()
	var pid int
	select {
	case pid = <-pidc:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not start its plugin within 60 s")
	}
	if pid <= 0 {
		t.Fatal("the agent printed no plugin pid")
	}
	// A pidfd, opened while the plugin surely runs, follows that process
	// and no other that might get its pid later.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)

	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		_ = unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("the plugin (pid %d) still runs 10 s after its agent was killed with SIGKILL", pid)
	}
}
