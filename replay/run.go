package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Kind is one run of a replay.
type Kind string

const (
	// Baseline: the trace's jobs alone.
	Baseline Kind = "baseline"
	// Polling: with harvest, the agent cancelling pilots a waiting job
	// could use (any batch system).
	Polling Kind = "polling"
	// Preemption: with harvest, pilots in the preemptible partition that
	// the scheduler preempts (the cluster needs PREEMPT=1).
	Preemption Kind = "preemption"
)

// Harvested reports whether the run has an agent.
func (k Kind) Harvested() bool { return k == Polling || k == Preemption }

// RunConfig is everything a replay's runs need besides the plan.
type RunConfig struct {
	// Harvest is the harvest binary the agent and pilots run.
	Harvest string
	// WorkDir holds the agent's state, the dataset and logs; it must be
	// on a file system every node and user can reach (the mini-cluster's
	// $LAB/shared).
	WorkDir string
	// JobCompLog is slurmctld's JobCompLoc (JobCompType=jobcomp/filetxt).
	JobCompLog string
	// Location is slurmctld's time zone (the log's times are local).
	Location *time.Location
	// Poll, Margin and MiniTime configure the agent; TaskSeconds is the
	// length of one harvest task, HarvestUser who submits the harvest job.
	Poll, Margin, MiniTime time.Duration
	TaskSeconds            float64
	HarvestUser            string
	// Drain bounds the wait, after the last submit, for every job to end.
	Drain time.Duration
	// Tag is the pilots' job name (the agent's default: harvest-pilot).
	Tag string
	// Lead starts a harvest run's agent and harvest job this long before
	// the window opens (its first submission), so that the window finds
	// the pool running, as a site's agent that runs all the time: the
	// pool's start-up and growth, which move with the machine's load,
	// fall outside it. Its simulation starts the harvest as long before.
	// 0 = the window opens as the harvest job is submitted.
	Lead time.Duration
	// Log receives progress lines.
	Log io.Writer
}

// Outcome is what one run produced: every job's record from SLURM's job
// completion log and the harvest tasks' ledger, times in seconds from T0.
type Outcome struct {
	Kind Kind
	T0   time.Time
	// Foreign maps plan job ids to their completions; Pilots are the
	// pilots' completions.
	Foreign map[string]Completion
	Pilots  []Completion
	Tasks   []TaskRun
	// Unfinished lists plan jobs with no completion by the deadline.
	Unfinished []string
	// AgentLog is the agent's log file (harvest runs).
	AgentLog string
	// HarvestStopS is when, in whole seconds from T0, the run cancelled
	// its pilots (harvest runs: once its last foreign job ended, or at the
	// drain deadline): from then on it holds no node, and its simulation
	// stops the harvest at the same second.
	HarvestStopS int64
	// LeadS is how long, in whole seconds, the harvest ran before T0
	// (RunConfig.Lead; harvest runs).
	LeadS int64
	// Ledger is the harvest tasks' ledger, in the harvest job's output
	// directory: confined tasks may write nowhere else.
	Ledger string
}

func (c RunConfig) logf(format string, a ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "replay %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
}

// Run replays the plan once as kind. The cluster must be idle; Run
// leaves it idle (it cancels what it started).
func Run(ctx context.Context, p Plan, kind Kind, cfg RunConfig) (Outcome, error) {
	out := Outcome{Kind: kind, Foreign: map[string]Completion{}}
	dir, err := os.MkdirTemp(cfg.WorkDir, "run-"+string(kind)+"-")
	if err != nil {
		return out, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return out, err
	}
	offset, err := fileSize(cfg.JobCompLog)
	if err != nil {
		return out, fmt.Errorf("job completion log: %w (start the cluster with JOBCOMP=1)", err)
	}
	var agent *exec.Cmd
	if kind.Harvested() {
		if agent, err = startHarvest(ctx, p, kind, cfg, dir, &out); err != nil {
			return out, err
		}
		defer stopAgent(agent)
	}

	// Start on a whole second: the log's times are whole seconds. A
	// harvest run's window opens its lead after the harvest job was
	// submitted (its demand starts the pool).
	now := time.Now()
	out.T0 = now.Truncate(time.Second).Add(time.Second)
	if agent != nil {
		out.LeadS = max(0, int64(cfg.Lead/time.Second))
		out.T0 = out.T0.Add(time.Duration(out.LeadS) * time.Second)
		cfg.logf("%s: the window opens in %d s, the pool running", kind, out.LeadS)
	}
	time.Sleep(time.Until(out.T0))
	ids := map[string]string{} // SLURM job id -> plan job id
	cfg.logf("%s: submitting %d jobs over %s", kind, len(p.Jobs), time.Duration(p.SpanS)*time.Second)
	for _, j := range p.Jobs {
		at := out.T0.Add(time.Duration(j.SubmitS) * time.Second)
		select {
		case <-ctx.Done():
			abandon(agent, cfg, ids)
			return out, ctx.Err()
		case <-time.After(time.Until(at)):
		}
		id, err := sbatch(j, dir)
		if err != nil {
			abandon(agent, cfg, ids)
			return out, err
		}
		ids[id] = j.ID
	}
	cfg.logf("%s: all submitted; waiting for them to end (at most %s)", kind, cfg.Drain)
	deadline := time.Now().Add(cfg.Drain)
	var comps []Completion
	for {
		if comps, err = readJobComp(cfg, offset); err != nil {
			return out, err
		}
		done := 0
		for _, c := range comps {
			if _, ok := ids[c.JobID]; ok {
				done++
			}
		}
		if done == len(ids) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if agent != nil {
		stopAgent(agent)
		agent = nil
	}
	out.HarvestStopS = int64(math.Floor(time.Since(out.T0).Seconds()))
	cancelAll(cfg, ids)
	if err := waitIdle(30 * time.Second); err != nil {
		return out, err
	}
	if ctx.Err() != nil {
		return out, ctx.Err() // stopped: jobs, pilots and agent gone, no outcome
	}
	// The pilots' lines are written as they end: read the log once more.
	if comps, err = readJobComp(cfg, offset); err != nil {
		return out, err
	}
	for _, c := range comps {
		if pid, ok := ids[c.JobID]; ok {
			out.Foreign[pid] = c
		} else if c.Name == cfg.Tag {
			out.Pilots = append(out.Pilots, c)
		}
	}
	for _, pid := range ids {
		if _, ok := out.Foreign[pid]; !ok {
			out.Unfinished = append(out.Unfinished, pid)
		}
	}
	if kind.Harvested() {
		// No ledger means no task ran: the caller judges that from Tasks.
		f, err := os.Open(out.Ledger)
		if err == nil {
			out.Tasks, err = ParseLedger(f)
			f.Close()
		}
		if err != nil && !os.IsNotExist(err) {
			return out, fmt.Errorf("the harvest tasks' ledger: %w", err)
		}
	}
	cfg.logf("%s: %d jobs ended, %d pilots, %d task runs", kind, len(out.Foreign), len(out.Pilots), len(out.Tasks))
	return out, nil
}

// sbatch submits one plan job as its user: a sleep of its run time.
func sbatch(j Job, dir string) (string, error) {
	limit := "UNLIMITED"
	if j.LimitMin > 0 {
		limit = strconv.FormatInt(j.LimitMin, 10)
	}
	args := []string{"--parsable", "-p", "batch", "-N", strconv.Itoa(j.Nodes), "-t", limit, "-J", "replay-" + j.ID,
		"-o", "/dev/null", "-D", dir, "--wrap", "sleep " + strconv.FormatInt(j.RunS, 10)}
	name, argv := "sbatch", args
	if j.User != "" && j.User != "root" {
		name, argv = "runuser", append([]string{"-u", j.User, "--", "sbatch"}, args...)
	}
	b, err := command(name, argv...)
	if err != nil {
		return "", fmt.Errorf("submit job %s as %s: %w", j.ID, j.User, err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(b), ";")
	if _, err := strconv.Atoi(id); err != nil {
		return "", fmt.Errorf("submit job %s: sbatch said %q", j.ID, b)
	}
	return id, nil
}

// ledgerName is the harvest tasks' ledger in their job's output directory.
const ledgerName = ".ledger"

// startHarvest starts the agent (hosting the queue) and submits a harvest
// job big enough to keep every node busy for the whole run.
func startHarvest(ctx context.Context, p Plan, kind Kind, cfg RunConfig, dir string, out *Outcome) (*exec.Cmd, error) {
	for _, d := range []string{"agent", "state", "pilots", "data"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	tasks := int(float64(p.Scaled.MaxNodes)*(float64(p.SpanS)+cfg.Drain.Seconds())/cfg.TaskSeconds*1.2) + 10
	data := filepath.Join(dir, "data")
	for i := range tasks {
		if err := os.WriteFile(filepath.Join(data, fmt.Sprintf("t%06d", i)), nil, 0o644); err != nil {
			return nil, err
		}
	}
	if _, err := command("chown", "-R", cfg.HarvestUser, data); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(dir, "run", "q.sock") // outside the agent's private state directory
	out.AgentLog = filepath.Join(dir, "agent.log")
	logf, err := os.Create(out.AgentLog)
	if err != nil {
		return nil, err
	}
	giveBack := "polling"
	if kind == Preemption {
		giveBack = "preemption"
	}
	pilot := cfg.Harvest + " pilot --heartbeat " + pilotHeartbeat.String() + " --master-grace 10s --reconnect-grace 10s --worker-timeout 15s"
	agent := exec.Command(cfg.Harvest, "agent",
		"--state-dir", filepath.Join(dir, "agent"), "--shared-dir", filepath.Join(dir, "state"),
		"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--socket", socket, "--allowed-root", dir,
		"--poll", cfg.Poll.String(), "--margin", cfg.Margin.String(), "--mini-time", cfg.MiniTime.String(),
		"--give-back", giveBack,
		"--pilot-command", pilot, "--pilot-output", filepath.Join(dir, "pilots", "pilot-%j.out"),
		"--dump-snapshots", filepath.Join(dir, "rounds"), "--log-level", "info")
	agent.Stdout, agent.Stderr = logf, logf
	if err := agent.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	logf.Close()
	for i := 0; ; i++ {
		if _, err := os.Stat(socket); err == nil {
			break
		}
		if i > 100 || ctx.Err() != nil {
			stopAgent(agent)
			return nil, fmt.Errorf("the agent did not open its socket; see %s", out.AgentLog)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Each task notes when it starts and ends, and in which pilot, so
	// that busy and lost pilot time come from the tasks themselves. The
	// ledger lies in the job's output directory: tasks are confined to it.
	script := fmt.Sprintf(`l="$(dirname {output})/%[1]s"; echo "s {task} $HARVEST_PILOT_ID $(date +%%s.%%N)" >> "$l"; sleep %[2]g; echo "e {task} $HARVEST_PILOT_ID $(date +%%s.%%N)" >> "$l"; : > {output}`,
		ledgerName, cfg.TaskSeconds)
	b, err := command("runuser", "-u", cfg.HarvestUser, "--", cfg.Harvest, "submit", "--queue", "unix://"+socket, "--json",
		"--batch-size", "1", data, "--", "/bin/sh", "-c", script)
	if err != nil {
		stopAgent(agent)
		return nil, fmt.Errorf("submit the harvest job: %w", err)
	}
	var j struct {
		ID        int64  `json:"id"`
		OutputDir string `json:"output_dir"`
	}
	if err := json.Unmarshal([]byte(b), &j); err != nil || j.OutputDir == "" {
		stopAgent(agent)
		return nil, fmt.Errorf("harvest submit said %q (want a job with its output_dir): %v", b, err)
	}
	out.Ledger = filepath.Join(j.OutputDir, ledgerName)
	cfg.logf("%s: agent up (log %s), harvest job %d of %d tasks of %gs", kind, out.AgentLog, j.ID, tasks, cfg.TaskSeconds)
	return agent, nil
}

// stopAgent stops the agent with SIGTERM (it leaves its pilots running).
func stopAgent(a *exec.Cmd) {
	if a == nil || a.Process == nil || a.ProcessState != nil {
		return
	}
	a.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { a.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		a.Process.Kill()
		<-done
	}
}

// abandon ends a run cut short: its agent first, then its jobs and every
// pilot. Cancelled first, the jobs freed nodes the still running agent
// filled with new pilots, which outlived the replay (a SIGTERM'd replay
// under load left a pilot queued).
func abandon(agent *exec.Cmd, cfg RunConfig, ids map[string]string) {
	stopAgent(agent)
	cancelAll(cfg, ids)
}

// cancelAll cancels the run's foreign jobs and every pilot.
func cancelAll(cfg RunConfig, ids map[string]string) {
	var list []string
	for id := range ids {
		list = append(list, id)
	}
	if len(list) > 0 {
		command("scancel", list...)
	}
	command("scancel", "--name", cfg.Tag)
}

// waitIdle waits until squeue shows no pending or running job.
func waitIdle(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		b, err := command("squeue", "-h", "-t", "PD,R,CG", "-o", "%i")
		if err == nil && strings.TrimSpace(b) == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobs still queued or running %s after the run: %s", limit, strings.TrimSpace(b))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readJobComp reads the completion log from offset on.
func readJobComp(cfg RunConfig, offset int64) ([]Completion, error) {
	f, err := os.Open(cfg.JobCompLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	return ParseJobComp(f, cfg.Location)
}

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		// slurmctld creates it at the first job's end: make sure the
		// cluster writes one (check the configuration instead).
		b, cerr := command("scontrol", "show", "config")
		if cerr == nil && strings.Contains(b, "jobcomp/filetxt") {
			return 0, nil
		}
		return 0, fmt.Errorf("%s does not exist and the cluster's JobCompType is not jobcomp/filetxt", path)
	}
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func command(name string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}
