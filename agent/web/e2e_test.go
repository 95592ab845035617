package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestBrowserSeesTheLiveAgent starts a real `harvest agent --adapter sim`
// (the simulated cluster in real time), submits a harvest job, and opens
// the status page in headless Chromium: the DOM a person would see must
// show the pilots with deadlines, the decision and its reason, the job
// with its progress and the user. A screenshot is kept in the test's
// artifact directory (go test -artifacts -outputdir DIR keeps it).
func TestBrowserSeesTheLiveAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an agent and a browser")
	}
	browser := findChromium()
	if browser == "" {
		if os.Getenv("HARVEST_REQUIRE_BROWSER") != "" {
			t.Fatal("chromium not found (scripts/deps.sh installs it)")
		}
		t.Skip("chromium not found (scripts/deps.sh installs it; set HARVEST_REQUIRE_BROWSER=1 to fail instead)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "harvest")
	build := exec.Command("go", "build", "-o", bin, "github.com/harvest-hpc/harvest/cmd/harvest")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build harvest: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	for i := 0; i < 8; i++ {
		if err := os.MkdirAll(filepath.Join(data, "frames", fmt.Sprintf("f%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	sock := filepath.Join(dir, "q.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var agentLog bytes.Buffer
	agentCmd := exec.CommandContext(ctx, bin, "agent",
		"--adapter", "sim", "--adapter-opt", "nodes=8", "--adapter-opt", "load=0.3", "--adapter-opt", "seed=3",
		"--poll", "1s", "--state-dir", filepath.Join(dir, "state"), "--socket", sock, "--listen", addr,
		"--allowed-root", data, "--harvest-while-idle", "--admin", "siteadmin")
	agentCmd.Stdout, agentCmd.Stderr = &agentLog, &agentLog
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		agentCmd.Process.Signal(os.Interrupt)
		agentCmd.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", agentLog.String())
		}
	}()
	cli := func(args ...string) string {
		t.Helper()
		var out []byte
		var err error
		for try := 0; try < 50; try++ { // the agent may still be starting
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = append(os.Environ(), "HARVEST_QUEUE=unix://"+sock)
			out, err = cmd.CombinedOutput()
			if err == nil {
				return strings.TrimSpace(string(out))
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("harvest %v: %v\n%s", args, err, out)
		return ""
	}
	tok := cli("admin", "token", "create", "siteadmin", "--admin")
	cli("submit", filepath.Join(data, "frames"), "--batch-size", "2", "--name", "frames-e2e", "--", "/bin/true", "{input}")

	url := "http://" + addr + "/status?token=" + tok
	var dom string
	deadline := time.Now().Add(60 * time.Second)
	for {
		dom = runChromium(t, ctx, browser, dir, "--dump-dom", url)
		if strings.Contains(dom, `id="pilots"`) && strings.Contains(dom, "frames-e2e") || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	checks := []struct {
		what string
		re   string
	}{
		{"the signed-in admin", `signed in as <b>siteadmin</b> \(admin\)`},
		{"the cluster's size", `<b>8</b> nodes:`},
		{"the current decision", `<th>Decision</th><td>(submit \d+ pilot|release \d+ pilot|nothing)`},
		{"the policy case", `<span class="case">[a-z-]+</span>`},
		{"the decision's reason", `<th>Reason</th><td[^>]*>[a-z][^<]{10,}</td>`},
		{"a pilot with a state", `<td class="(idle|busy|queued)">(idle|busy|queued)</td>`},
		{"a pilot's deadline column", `Deadline \(UTC\)`},
		{"the harvest job with progress", `frames-e2e</td><td>(WAITING|RUNNING)</td><td><span class="bar">`},
		{"the job's task count", `<td class="num">8</td></tr>`},
		{"the user with priority and quota", `<td>root</td><td class="num">1</td>`},
		{"the utilisation chart", `<svg id="chart"`},
		{"the admin's harm figure", `<b id="delayed-now">\d+</b> foreign jobs waiting now for nodes pilots hold`},
		{"the jobs delayed so far", `<b id="delayed">\d+</b> delayed so far, <b id="total-delay">[0-9hms]+</b> in all`},
		{"the work lost to give-back", `<b id="lost-work">[0-9hms]+</b> of task time lost to give-back \(\d+ interrupted attempts`},
		{"the site's yield", `<tr><td>local</td><td class="num">[\d.]+</td><td class="num">[\d.]+</td><td class="num">(\d+%|-)</td>`},
	}
	for _, c := range checks {
		if !regexp.MustCompile(c.re).MatchString(dom) {
			t.Errorf("the page does not show %s (/%s/)", c.what, c.re)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	// Prometheus scrapes the same listener with a token.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`<td>local</td>(<td class="num">[\d.]+</td>){2}<td class="num">-</td>`).MatchString(dom) &&
		!regexp.MustCompile(`(?m)^harvest_site_yield\{site="local"\} [\d.e+-]+$`).Match(metrics) {
		t.Errorf("the page shows a yield for site local, /metrics has no harvest_site_yield for it")
	}
	for _, re := range []string{`(?m)^harvest_rounds_total [1-9]`, `(?m)^harvest_nodes\{state="total"\} 8$`,
		`(?m)^harvest_foreign_jobs_delayed \d+$`, `(?m)^harvest_foreign_delay_longest_seconds \d+$`, `(?m)^harvest_lost_task_seconds_total [\d.e+-]+$`,
		`(?m)^harvest_tasks\{state="waiting",user="root"\} 8$`, `(?m)^harvest_pilots_submitted_total [1-9]`} {
		if !regexp.MustCompile(re).Match(metrics) {
			t.Errorf("/metrics lacks /%s/", re)
		}
	}

	shot := filepath.Join(t.ArtifactDir(), "status.png")
	runChromium(t, ctx, browser, dir, "--window-size=1280,1300", "--screenshot="+shot, url)
	fi, err := os.Stat(shot)
	if err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (size %d)", shot, err, sizeOf(fi))
	}
	t.Logf("screenshot: %s", shot)

	// A pause shows on the page as a person would read it.
	cli("admin", "pause")
	dom = runChromium(t, ctx, browser, dir, "--dump-dom", url)
	if !strings.Contains(dom, "Harvesting is paused by the admin") {
		t.Errorf("the page does not say harvesting is paused")
	}

	// A drain before maintenance: the CLI shows progress until no pilot
	// is left, and the page says so.
	out := cli("admin", "drain", "--now", "--timeout", "30s", "--every", "200ms")
	if !strings.Contains(out, "no pilot left") {
		t.Errorf("drain output:\n%s", out)
	}
	// The page shows the last round's snapshot: the next round no longer
	// sees the cancelled pilots.
	for try := 0; try < 20; try++ {
		dom = runChromium(t, ctx, browser, dir, "--dump-dom", url)
		if strings.Contains(dom, `id="nopilots"`) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(dom, "Drained: no pilot left") || !strings.Contains(dom, `id="nopilots"`) {
		t.Errorf("after the drain the page does not show an empty, drained cluster")
	}
	// The pause survives a restart of the agent: checked through the
	// persisted switch the next agent reads.
	if b, err := os.ReadFile(filepath.Join(dir, "state", "control.json")); err != nil || !strings.Contains(string(b), `"paused": true`) {
		t.Errorf("control file: %s %v", b, err)
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}

func findChromium() string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// runChromium runs one headless Chromium with a fresh profile, no network
// beyond the page, and returns its stdout.
func runChromium(t *testing.T, ctx context.Context, browser, dir string, args ...string) string {
	t.Helper()
	prof, err := os.MkdirTemp(dir, "chromium-")
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + prof}
	cctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, browser, append(base, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
