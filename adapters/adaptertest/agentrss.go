package adaptertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildHarvest builds the harvest binary into dir and returns its path:
// the agent and the adapter plugin it starts (`harvest adapter serve`)
// are that binary, as they are on a head node.
func BuildHarvest(dir string) (string, error) {
	bin := filepath.Join(dir, "harvest")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/harvest-hpc/harvest/cmd/harvest").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// AgentRun is one `harvest agent` run whose peak memory is measured: the
// agent as a user starts it (its queue hosted, the adapter a go-plugin
// subprocess), in processes of its own, so that nothing the measuring
// process allocates (the batch system's answers it wrote) counts.
type AgentRun struct {
	Harvest string   // the harvest binary (BuildHarvest)
	Dir     string   // an empty directory with a short path (the socket's is limited to 108 bytes)
	Args    []string // added to `harvest agent`'s own: the adapter and its options, --dry-run...
	// Until reports, from the agent's /metrics, that what is measured has
	// happened (two snapshots taken or refused, a failed submit...).
	Until   func(metrics string) bool
	Timeout time.Duration // 0: two minutes
}

// PeakRSS is the peak resident memory (VmHWM) of the agent process and of
// its adapter plugin process, in KiB, read while both still run.
type PeakRSS struct {
	AgentKB, PluginKB int64
	Metrics           string // the /metrics that satisfied Until
}

// Measure starts the agent, waits until Until holds (or the deadline),
// reads both processes' VmHWM and stops the agent.
func (r AgentRun) Measure() (PeakRSS, error) {
	var res PeakRSS
	for _, d := range []string{"state", "data"} {
		if err := os.MkdirAll(filepath.Join(r.Dir, d), 0o700); err != nil {
			return res, err
		}
	}
	sock := filepath.Join(r.Dir, "q.sock")
	args := append([]string{"agent", "--state-dir", filepath.Join(r.Dir, "state"),
		"--allowed-root", filepath.Join(r.Dir, "data"), "--socket", sock, "--listen", "",
		"--poll", "100ms", "--log-level", "warn"}, r.Args...)
	cmd := exec.Command(r.Harvest, args...)
	stderr := &tail{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Start(); err != nil {
		return res, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("the agent did not stop within 30 s of SIGTERM")
		}
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	deadline := time.After(timeout)
	for {
		if body, err := get(hc, "http://agent/metrics"); err == nil && r.Until(body) {
			res.Metrics = body
			break
		}
		select {
		case err := <-exited:
			return res, fmt.Errorf("the agent exited before the measure: %v\n%s", err, stderr)
		case <-deadline:
			stop()
			return res, fmt.Errorf("not done within %v; the agent's log:\n%s", timeout, stderr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	var err error
	if res.AgentKB, err = VmHWM(cmd.Process.Pid); err == nil {
		var plugin int
		if plugin, err = pluginPid(cmd.Process.Pid); err == nil {
			res.PluginKB, err = VmHWM(plugin)
		}
	}
	if serr := stop(); err == nil && serr != nil {
		err = fmt.Errorf("%v\n%s", serr, stderr)
	}
	return res, err
}

func get(hc *http.Client, url string) (string, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// VmHWM is process pid's peak resident set size in KiB. Unlike
// getrusage's ru_maxrss it does not carry over an execve, so a child's
// figure is its own.
func VmHWM(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	_, after, ok := strings.Cut(string(status), "VmHWM:")
	if !ok {
		return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return strconv.ParseInt(strings.Fields(after)[0], 10, 64)
}

// pluginPid finds the agent's `harvest adapter serve` child.
func pluginPid(agent int) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(agent) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte("\x00adapter\x00serve\x00")) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("agent %d has no adapter plugin child", agent)
}

// MetricSum is the sum of metric name's samples (every label set) in a
// Prometheus text exposition; 0 when there are none.
func MetricSum(exposition, name string) float64 {
	var sum float64
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// AgentTargetKB is the agent's peak RSS target (issue 35 item 6): 300 MB.
const AgentTargetKB = 300 << 10

// AgentBench is what an adapter's BenchmarkAgentPeakRSS shares: a short
// directory (the agent's socket path is limited) holding the harvest
// binary and the batch system's answers.
type AgentBench struct{ Dir, Harvest string }

// NewAgentBench builds harvest into a fresh directory, removed at the end.
func NewAgentBench(b *testing.B) AgentBench {
	dir, err := os.MkdirTemp("", "hrss")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	harvest, err := BuildHarvest(dir)
	if err != nil {
		b.Fatal(err)
	}
	return AgentBench{Dir: dir, Harvest: harvest}
}

// Write writes an answer into the bench's directory and returns its path.
func (ab AgentBench) Write(b *testing.B, name string, data []byte) string {
	path := filepath.Join(ab.Dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// Measure runs the agent once with args and the adapter's commands given
// as /bin/sh script bodies (put in a directory it passes as the bin_dir
// adapter option), until until holds; it reports both peak RSS figures
// and fails b when the agent's is over AgentTargetKB.
func (ab AgentBench) Measure(b *testing.B, name string, scripts map[string]string, args []string, until func(string) bool, timeout time.Duration) {
	run, err := os.MkdirTemp(ab.Dir, name)
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(run, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		b.Fatal(err)
	}
	for cmd, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, cmd), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	r, err := AgentRun{Harvest: ab.Harvest, Dir: run, Until: until, Timeout: timeout,
		Args: append([]string{"--adapter-opt", "bin_dir=" + bin}, args...)}.Measure()
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	b.ReportMetric(float64(r.AgentKB)/1024, "agent-peak-RSS-MB")
	b.ReportMetric(float64(r.PluginKB)/1024, "plugin-peak-RSS-MB")
	b.Logf("%s: agent %d MB, plugin %d MB; rounds %v, snapshot failures %v, submit failures %v", name, r.AgentKB>>10, r.PluginKB>>10,
		MetricSum(r.Metrics, "harvest_rounds_total"), MetricSum(r.Metrics, "harvest_snapshot_failures_total"),
		MetricSum(r.Metrics, "harvest_submit_failures_total"))
	if r.AgentKB > AgentTargetKB {
		b.Errorf("%s: the agent's peak RSS is %d MB, over the 300 MB target", name, r.AgentKB>>10)
	}
}
