package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
)

// lab is one SLURM mini-cluster (scripts/minicluster.sh) and the harvest
// site that runs on it.
type lab struct {
	site string
	conf string // its slurm.conf
}

func (l lab) cmd(name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Env = append(os.Environ(), "SLURM_CONF="+l.conf)
	c.Dir = "/tmp"
	return c
}

func (l lab) run(name string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	c := l.cmd(name, args...)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s (%s): %w: %s", name, strings.Join(args, " "), l.site, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// clean cancels every job of the cluster and waits until none is left.
func (l lab) clean() {
	l.run("scancel", "--full", "-u", "root")
	l.run("scancel", "-u", "carol")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out, err := l.run("squeue", "-h", "-o", "%i")
		if err == nil && strings.TrimSpace(out) == "" {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// pilots counts the running pilots.
func (l lab) pilots() int {
	out, err := l.run("squeue", "-h", "-t", "R", "-n", "harvest-pilot", "-o", "%i")
	if err != nil {
		return -1
	}
	return len(strings.Fields(out))
}

// setup is one run of a scenario: a queue hosted by the first site's agent,
// the other sites' agents using it, one user's job.
type setup struct {
	bin, work string
	port      int
	labs      []lab // labs[0] hosts the queue
	agents    []*exec.Cmd
	// pilotArgs are added to every pilot's command line.
	pilotArgs string
	// shared: every site's agent serves the queue on one database
	// (work/queue.db), site i's on ports[i], each naming the others as
	// peers; via is the agent whose socket the CLI uses.
	shared bool
	ports  []int
	via    int
	// db is the shared database: a SQLite file (default work/queue.db; both
	// agents run on this host) or a postgres:// URL.
	db string
}

// socket is the Unix socket of the agent the CLI uses, outside its private
// state directory.
func (s *setup) socket() string { return s.socketOf(s.via) }

func (s *setup) socketOf(i int) string {
	if i == 0 {
		return filepath.Join(s.work, "run", "q.sock")
	}
	return filepath.Join(s.work, "run", s.labs[i].site+".sock")
}

func (s *setup) queueURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// urlOf is site i's queue URL in a shared setup.
func (s *setup) urlOf(i int) string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports[i]))
}

// sharedArgs are site i's queue flags in a shared setup: its own
// listener and socket on the one database, the others as peers.
func (s *setup) sharedArgs(i int) []string {
	if s.db == "" {
		s.db = filepath.Join(s.work, "queue.db")
	}
	args := []string{"--site", s.labs[i].site, "--listen", strings.TrimPrefix(s.urlOf(i), "http://"), "--socket", s.socketOf(i),
		"--allowed-root", s.work, "--lease-ttl", "8s", "--db", s.db}
	for k := range s.labs {
		if k != i {
			args = append(args, "--peer", s.urlOf(k))
		}
	}
	return args
}

// start starts the first site's agent hosting the queue, registers the
// other sites and starts their agents against it.
func (s *setup) start(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(s.work, "data"), 0o755); err != nil {
		return err
	}
	for i, l := range s.labs {
		dir := filepath.Join(s.work, l.site)
		for _, d := range []string{dir, filepath.Join(dir, "shared"), filepath.Join(dir, "pilots")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		pilot := fmt.Sprintf("%s pilot --heartbeat 1s --master-grace 10s --reconnect-grace 10s --worker-timeout 15s %s", s.bin, s.pilotArgs)
		args := []string{"agent", "--state-dir", dir, "--shared-dir", filepath.Join(dir, "shared"),
			"--poll", "2s", "--margin", "30s", "--mini-time", "10s", "--pilot-command", pilot,
			"--pilot-output", filepath.Join(dir, "pilots", "pilot-%j.out"),
			"--adapter-opt", "slurm_conf=" + l.conf, "--log-level", "info"}
		if s.shared {
			args = append(args, s.sharedArgs(i)...)
		} else if i == 0 {
			args = append(args, "--site", l.site, "--listen", strings.TrimPrefix(s.queueURL(), "http://"), "--socket", s.socket(),
				"--allowed-root", s.work, "--lease-ttl", "8s")
		} else {
			tok, err := s.admin(ctx, "admin", "site", "add", l.site)
			if err != nil {
				return err
			}
			tf := filepath.Join(dir, "agent.token")
			if err := os.WriteFile(tf, []byte(strings.TrimSpace(tok)+"\n"), 0o600); err != nil {
				return err
			}
			args = append(args, "--queue", s.queueURL(), "--agent-token-file", tf)
		}
		logf, err := os.Create(filepath.Join(dir, "agent.log"))
		if err != nil {
			return err
		}
		a := l.cmd(s.bin, args...)
		a.Stdout, a.Stderr = logf, logf
		if err := a.Start(); err != nil {
			return err
		}
		s.agents = append(s.agents, a)
		if i == 0 || s.shared {
			s.via = i
			if err := s.waitQueue(ctx); err != nil {
				return err
			}
		}
	}
	s.via = 0
	return nil
}

// waitQueue waits until the hosted queue answers on its socket.
func (s *setup) waitQueue(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := s.admin(ctx, "admin", "sites"); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the queue of site %s did not answer within 30 s (see %s)", s.labs[s.via].site,
		filepath.Join(s.work, s.labs[s.via].site, "agent.log"))
}

// admin runs a harvest CLI command as root on the queue's socket.
func (s *setup) admin(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	c := exec.CommandContext(ctx, s.bin, append(args, "--queue", "unix://"+s.socket())...)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("harvest %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// stop stops the agents (pilots keep running; clean cancels them).
func (s *setup) stop() {
	for _, a := range s.agents {
		if a.Process != nil {
			a.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, a := range s.agents {
		done := make(chan struct{})
		go func() { a.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			a.Process.Kill()
			<-done
		}
	}
	s.agents = nil
	for _, l := range s.labs {
		l.clean()
	}
}

// dataset makes carol's dataset of n entries.
func (s *setup) dataset(name string, n int) (string, error) {
	ds := filepath.Join(s.work, "data", name)
	for i := range n {
		sub := filepath.Join(ds, fmt.Sprintf("sub%04d", i))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(sub, "data.txt"), []byte(fmt.Sprintf("%d\n", i)), 0o644); err != nil {
			return "", err
		}
	}
	if out, err := exec.Command("chown", "-R", "carol", ds).CombinedOutput(); err != nil {
		return "", fmt.Errorf("chown: %w: %s", err, out)
	}
	return ds, nil
}

// ledgerName is the file in a job's output directory where each completed
// run appends "TASK site:SITE START END" (tasks may write only there).
const ledgerName = "runs.ledger"

// submit submits carol's job of one task per entry of ds: each runs work
// (a shell command), then appends a line to the ledger in the job's output
// directory, so runs are counted by the tasks themselves, not only by the
// queue. It returns the job's id and the ledger's path.
func (s *setup) submit(ctx context.Context, ds, work string) (int64, string, error) {
	var out, errb bytes.Buffer
	script := `s=$(date +%s.%N); ` + work + ` && echo ok > {output} && echo "{task} site:$HARVEST_SITE $s $(date +%s.%N)" >> "$(dirname {output})/` + ledgerName + `"`
	c := exec.CommandContext(ctx, "runuser", "-u", "carol", "--", s.bin, "submit", "--queue", "unix://"+s.socket(), "--json",
		"--batch-size", "1", "--name", filepath.Base(ds), ds, "--", "/bin/sh", "-c", script)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return 0, "", fmt.Errorf("submit: %w: %s", err, errb.String())
	}
	var j api.Job
	if err := json.Unmarshal(out.Bytes(), &j); err != nil || j.ID == 0 {
		return 0, "", fmt.Errorf("submit answered %q: %v", out.String(), err)
	}
	return j.ID, filepath.Join(j.OutputDir, ledgerName), nil
}

// job reads a job as root.
func (s *setup) job(ctx context.Context, id int64) (api.Job, error) {
	out, err := s.admin(ctx, "status", "--json", strconv.FormatInt(id, 10))
	if err != nil {
		return api.Job{}, err
	}
	var j api.Job
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		return api.Job{}, fmt.Errorf("status answered %q: %w", out, err)
	}
	return j, nil
}

// sites reads the sites' figures.
func (s *setup) sites(ctx context.Context) (api.SiteList, error) {
	out, err := s.admin(ctx, "admin", "sites", "--json")
	if err != nil {
		return api.SiteList{}, err
	}
	var l api.SiteList
	return l, json.Unmarshal([]byte(out), &l)
}

// outcome is what one job's run showed.
type outcome struct {
	job      api.Job
	makespan time.Duration // submit to final
	// done counts completed runs per site from the tasks' own ledger;
	// lost is the tasks that never completed, dup the runs beyond one.
	done      map[string]int
	lost, dup int
	// run is every completed run's time in seconds, by site.
	run   map[string][]float64
	sites api.SiteList
	// pilots is the running pilots per site, sampled every 2 s.
	pilots map[string][]int
}

// wait waits for the job to be final, sampling the pilots, then reads the
// ledger and the sites' figures.
func (s *setup) wait(ctx context.Context, id int64, tasks int, ledger string, timeout time.Duration) (outcome, error) {
	o := outcome{pilots: map[string][]int{}}
	start := time.Now()
	for {
		if time.Since(start) > timeout {
			return o, fmt.Errorf("job %d not final after %v", id, timeout)
		}
		for _, l := range s.labs {
			o.pilots[l.site] = append(o.pilots[l.site], l.pilots())
		}
		if j, err := s.job(ctx, id); err == nil && api.JobFinal(j.State) {
			o.job, o.makespan = j, time.Since(start)
			break
		}
		time.Sleep(2 * time.Second)
	}
	var err error
	if o.sites, err = s.sites(ctx); err != nil {
		return o, err
	}
	var perTask map[string]int
	if o.done, o.run, perTask, err = readLedger(ledger); err != nil {
		return o, err
	}
	for _, n := range perTask {
		o.dup += n - 1
	}
	o.lost = tasks - len(perTask)
	return o, nil
}

// readLedger counts the completed runs per site and per task, and each
// run's time by site.
func readLedger(path string) (perSite map[string]int, run map[string][]float64, perTask map[string]int, err error) {
	perSite, run, perTask = map[string]int{}, map[string][]float64{}, map[string]int{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return perSite, run, perTask, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 {
			continue
		}
		site := strings.TrimPrefix(fs[1], "site:")
		fs[1] = site
		perTask[fs[0]]++
		perSite[site]++
		a, err1 := strconv.ParseFloat(fs[2], 64)
		b, err2 := strconv.ParseFloat(fs[3], 64)
		if err1 == nil && err2 == nil {
			run[fs[1]] = append(run[fs[1]], b-a)
		}
	}
	return perSite, run, perTask, sc.Err()
}

// meanMax summarises samples (negative ones, failed reads, are skipped).
func meanMax(xs []int) (float64, int) {
	sum, n, m := 0, 0, 0
	for _, x := range xs {
		if x < 0 {
			continue
		}
		sum += x
		n++
		m = max(m, x)
	}
	if n == 0 {
		return 0, 0
	}
	return float64(sum) / float64(n), m
}

// serveContended starts the contended file server on 127.0.0.1:port.
func serveContended(port int, size int, total, perConn float64) (*contended, func(), error) {
	c := newContended(size, total, perConn)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	return c, func() { srv.Close() }, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
