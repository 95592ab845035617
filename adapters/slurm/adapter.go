// Package slurm is the harvest adapter for SLURM (written against 22.05,
// the version in Debian 12). It drives the command-line clients: squeue,
// sinfo and scontrol for snapshots, sbatch to submit pilots and scancel
// to release them. The parsers are pure functions over the exact output
// formats the adapter asks for; see docs/slurm.md.
package slurm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/command"
)

// Granularity is SLURM's time-limit granularity: whole minutes.
const Granularity = 60

// Adapter talks to one SLURM cluster. It is safe for concurrent use.
type Adapter struct {
	cfg  Config
	user string
	run  runFunc
	now  func() time.Time

	mu      sync.Mutex
	maxTime cluster.Limit // the partition's MaxTime from the last snapshot; 0 = not known yet
	tier    *tier         // the preemption set-up, once probed
}

// tier is what the adapter learnt once about preemption and sizing: the
// harvested partition's preemptible tier (nil: none) and whether backfill
// sizes --time-min jobs.
type tier struct {
	version string
	pre     *adapters.Preemption
	timeMin bool
}

// usable returns the preemptible partition pilots may use, or "".
func (t *tier) usable() *adapters.Preemption {
	if t == nil || t.pre == nil || !t.pre.Usable {
		return nil
	}
	return t.pre
}

var _ adapters.Adapter = (*Adapter)(nil)

// New returns an adapter for cfg. It does not contact SLURM.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u := cfg.User
	if u == "" {
		cur, err := user.Current()
		switch {
		case err == nil:
			u = cur.Username
		case os.Getenv("USER") != "":
			u = os.Getenv("USER")
		default:
			return nil, fmt.Errorf("%w: cannot tell the agent's user (set user): %v", ErrConfig, err)
		}
	}
	a := &Adapter{cfg: cfg, user: u, now: time.Now}
	a.run = a.execRun
	return a, nil
}

// Config returns the adapter's configuration.
func (a *Adapter) Config() Config { return a.cfg }

// Info reports the adapter and SLURM's version (`sinfo --version`, which
// does not need the controller).
// It also reports the preemptible tier (DetectPreemption, from
// `scontrol show config` and `scontrol -a -o show partition`) and whether
// backfill sizes --time-min pilots (TimeMinSizes).
func (a *Adapter) Info(ctx context.Context) (adapters.Info, error) {
	info := adapters.Info{
		Name:            "slurm",
		Tag:             a.cfg.Tag,
		TimeGranularity: Granularity,
		ExpectedStart:   true,
		Backfill:        true,
		Shrink:          true,
		SubmitsVisible:  true,
	}
	t, err := a.probe(ctx)
	if err != nil {
		return info, err
	}
	info.Version, info.Preemption, info.TimeMinSizing = t.version, t.pre, t.timeMin
	return info, nil
}

// probe learns, once, SLURM's version, its preemption set-up and whether
// its backfill sizes --time-min jobs. A failure is not remembered.
func (a *Adapter) probe(ctx context.Context) (*tier, error) {
	a.mu.Lock()
	t := a.tier
	a.mu.Unlock()
	if t != nil {
		return t, nil
	}
	out, err := a.query(ctx, a.cfg.binary("sinfo", a.cfg.Sinfo), []string{"--version"})
	if err != nil {
		return nil, err
	}
	t = &tier{}
	if t.version, err = ParseVersion(out); err != nil {
		return nil, err
	}
	out, err = a.query(ctx, a.cfg.binary("scontrol", a.cfg.Scontrol), []string{"show", "config"})
	if err != nil {
		return nil, err
	}
	conf, err := ParseConfig(out)
	if err != nil {
		return nil, err
	}
	parts, err := a.partitions(ctx)
	if err != nil {
		return nil, err
	}
	h, err := PickPartition(parts, a.cfg.Partition)
	if err != nil {
		return nil, err
	}
	t.pre = DetectPreemption(conf, parts, h, a.cfg.PreemptPartition)
	t.timeMin = TimeMinSizes(t.version, conf)
	a.mu.Lock()
	a.tier = t
	a.mu.Unlock()
	return t, nil
}

// partition asks scontrol for the configured (or default) partition.
func (a *Adapter) partition(ctx context.Context) (Partition, error) {
	ps, err := a.partitions(ctx)
	if err != nil {
		return Partition{}, err
	}
	return PickPartition(ps, a.cfg.Partition)
}

// partitions lists every partition, hidden ones too (-a): a site may hide
// the preemptible one from its users.
func (a *Adapter) partitions(ctx context.Context) ([]Partition, error) {
	out, err := a.query(ctx, a.cfg.binary("scontrol", a.cfg.Scontrol), []string{"-a", "-o", "show", "partition"})
	if err != nil {
		return nil, err
	}
	return ParsePartitions(out)
}

// PickPartition returns the partition named name, or the default one
// (Default=YES; the only one if there is a single partition) when name is
// empty.
func PickPartition(ps []Partition, name string) (Partition, error) {
	for _, p := range ps {
		if (name != "" && p.Name == name) || (name == "" && p.Default) {
			return p, nil
		}
	}
	if name == "" && len(ps) == 1 {
		return ps[0], nil
	}
	if name == "" {
		return Partition{}, fmt.Errorf("%w: the cluster has no default partition; set partition", ErrConfig)
	}
	return Partition{}, fmt.Errorf("%w: partition %q does not exist", ErrConfig, name)
}

// Snapshot describes the harvested partition: nodes from sinfo, jobs from
// squeue (pending ones in scheduling order), pilots marked, MaxTime from
// scontrol. Any failure is an error; a partial snapshot is never returned,
// nor one whose answers contradict each other (CrossCheck).
func (a *Adapter) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	t, err := a.probe(ctx)
	if err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: %w", err)
	}
	all, err := a.partitions(ctx)
	if err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: %w", err)
	}
	part, err := PickPartition(all, a.cfg.Partition)
	if err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: %w", err)
	}
	// The preemptible tier's pilots hold the same nodes: list them too.
	listed := []string{part.Name}
	pre := t.usable()
	if pre != nil {
		listed = append(listed, pre.Partition)
	}
	parts := strings.Join(listed, ",")
	squeue := a.cfg.binary("squeue", a.cfg.Squeue)
	now := a.now().Unix()
	var jobs []cluster.Job
	_, err = a.queryParse(ctx, squeue,
		[]string{"-a", "-h", "-r", "-p", parts, "-t", squeueStates, "-o", squeueFormat},
		func(r io.Reader) (err error) {
			jobs, err = ReadSqueue(lineLimit(r, a.cfg.MaxJobs, "squeue", "jobs", "max_jobs"), now, all)
			return err
		},
		"SLURM_TIME_FORMAT=%s")
	if err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: %w", err)
	}
	// Asked after the job list, so every pilot in that list is in this one.
	out, err := a.query(ctx, squeue,
		[]string{"-a", "-h", "-r", "-p", parts, "-u", a.user, "-n", a.cfg.Tag, "-t", squeueStates, "-o", "%i"})
	if err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: pilots: %w", err)
	}
	ids, err := ParseJobIDs(out)
	if err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: pilots: %w", err)
	}
	MarkPilots(jobs, ids, a.cfg.Tag)
	// The end of running pilots to the second: %l is in minutes and stays
	// as it was when the end is pulled in (Shrink) or set by a preemption
	// with a grace time.
	out, err = a.query(ctx, squeue,
		[]string{"-a", "-h", "-r", "-p", parts, "-u", a.user, "-n", a.cfg.Tag, "-t", "RUNNING", "-o", pilotEndFormat},
		"SLURM_TIME_FORMAT=%s")
	if err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: pilot ends: %w", err)
	}
	ends, err := ParsePilotEnds(out)
	if err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: pilot ends: %w", err)
	}
	// sinfo -p shows a hidden partition too (it implies --all; 22.05
	// refuses -a beside -p).
	var (
		nodes  []cluster.Node
		counts NodeCounts
	)
	_, err = a.queryParse(ctx, a.cfg.binary("sinfo", a.cfg.Sinfo), []string{"-h", "-N", "-p", part.Name, "-o", sinfoFormat},
		func(r io.Reader) (err error) {
			nodes, counts, err = ReadSinfo(lineLimit(r, a.cfg.MaxNodes, "sinfo", "nodes", "max_nodes"))
			return err
		})
	if err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: partition %s: %w", part.Name, err)
	}
	if err := a.crossCheck(ctx, jobs, nodes, counts, listed, now); err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: %w", err)
	}
	snap := BuildSnapshot(now, part, ApplyTier(jobs, pre, ends), nodes, counts)
	if err := snap.Validate(); err != nil {
		return cluster.Snapshot{}, fmt.Errorf("slurm snapshot: %w", err)
	}
	a.mu.Lock()
	a.maxTime = part.MaxTime
	a.mu.Unlock()
	return snap, nil
}

// holdersFormat lists the jobs that hold nodes, in any partition: id,
// partition, node count, start (Unix seconds), state.
const holdersFormat = "%i|%P|%D|%S|%T"

// holderStates are the states of jobs that hold nodes: the job list's,
// and SUSPENDED (left out of the snapshot, but its nodes stay allocated).
const holderStates = "RUNNING,CONFIGURING,COMPLETING,SUSPENDED"

// crossCheck makes sure the job list accounts for sinfo's allocated nodes
// (see CrossCheck). In the common case the listed running jobs hold
// enough nodes and nothing is asked; otherwise squeue is asked which jobs,
// in any partition, run on the allocated nodes.
func (a *Adapter) crossCheck(ctx context.Context, jobs []cluster.Job, nodes []cluster.Node, c NodeCounts, listed []string, listedAt int64) error {
	if c.Allocated <= heldNodes(jobs) {
		return nil
	}
	var names []string
	for _, n := range nodes {
		if n.State == cluster.NodeAllocated {
			names = append(names, n.Name)
		}
	}
	out, err := a.query(ctx, a.cfg.binary("squeue", a.cfg.Squeue),
		[]string{"-a", "-h", "-r", "-t", holderStates, "-w", strings.Join(names, ","), "-o", holdersFormat},
		"SLURM_TIME_FORMAT=%s")
	if err != nil {
		return fmt.Errorf("jobs on the allocated nodes: %w", err)
	}
	holders, err := ParseHolders(out)
	if err != nil {
		return fmt.Errorf("jobs on the allocated nodes: %w", err)
	}
	return CrossCheck(jobs, c.Allocated, holders, listed, listedAt)
}

// heldNodes is the number of nodes the running jobs hold.
func heldNodes(jobs []cluster.Job) int {
	n := 0
	for _, j := range jobs {
		if j.State == cluster.Running {
			n += j.Nodes
		}
	}
	return n
}

// CrossCheck compares the job list of the listed partitions (squeue, read
// at listedAt) with sinfo's allocated nodes and the holders, every job
// running on those nodes in any partition (a second squeue, read after
// sinfo). The snapshot is not valid (an error wrapping
// cluster.ErrInvalidSnapshot; the agent tries again next round) when
//
//   - the holders hold fewer nodes than sinfo shows allocated: nodes busy
//     with no job, as when squeue answered with nothing beside a busy
//     cluster;
//   - a running holder of a listed partition that started before the job
//     list was read is missing from it: the job list was incomplete.
//
// Holders of other partitions (over the same nodes), suspended jobs and
// jobs that started after the job list was read explain the difference
// and are fine.
func CrossCheck(jobs []cluster.Job, allocated int, holders []Holder, listed []string, listedAt int64) error {
	have := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		if j.State == cluster.Running {
			have[j.ID] = true
		}
	}
	held := 0
	for _, h := range holders {
		held += h.Nodes
		if h.State != "SUSPENDED" && slices.Contains(listed, h.Partition) && !have[h.ID] && h.Start > 0 && h.Start < listedAt {
			return fmt.Errorf("%w: job %s runs in partition %s since %d but squeue's job list (read at %d) does not show it",
				cluster.ErrInvalidSnapshot, h.ID, h.Partition, h.Start, listedAt)
		}
	}
	if held < allocated {
		return fmt.Errorf("%w: sinfo shows %d allocated nodes but squeue shows jobs holding only %d (%d running jobs listed)",
			cluster.ErrInvalidSnapshot, allocated, held, len(have))
	}
	return nil
}

// MarkPilots marks the jobs whose id is in ids (the agent user's jobs
// named tag) as pilots.
func MarkPilots(jobs []cluster.Job, ids []string, tag string) {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	for i := range jobs {
		if set[jobs[i].ID] {
			jobs[i].Pilot = true
			jobs[i].Name = tag
		}
	}
}

// BuildSnapshot assembles a snapshot. A partition that is not UP starts
// no jobs, so its idle nodes are reported as drained: the agent must not
// submit pilots that would only queue.
func BuildSnapshot(now int64, part Partition, jobs []cluster.Job, nodes []cluster.Node, c NodeCounts) cluster.Snapshot {
	if part.State != "" && part.State != "UP" {
		c.Drained += c.Idle
		c.Idle, c.Planned = 0, 0
	}
	s := cluster.Snapshot{
		Now:          now,
		TotalNodes:   c.Total,
		IdleNodes:    c.Idle,
		PlannedNodes: c.Planned,
		DrainedNodes: c.Drained,
		Partition:    part.Name,
		Jobs:         jobs,
		Nodes:        nodes,
	}
	if s.Jobs == nil {
		s.Jobs = []cluster.Job{}
	}
	if !part.MaxTime.IsUnlimited() {
		mt := part.MaxTime
		s.MaxTime = &mt
	}
	return s
}

// SbatchArgs returns sbatch's arguments for a pilot with the given
// (already rounded, at least one minute, or unlimited) limit. The batch
// script goes to sbatch's stdin.
func (a *Adapter) SbatchArgs(limit cluster.Limit, spec adapters.PilotSpec) []string {
	args := []string{"--parsable", "--job-name=" + a.cfg.Tag, "--nodes=1", "--no-requeue",
		"--comment=harvest pilot tag=" + a.cfg.Tag}
	if limit.IsUnlimited() {
		args = append(args, "--time=UNLIMITED")
	} else {
		args = append(args, "--time="+strconv.FormatInt(int64(limit)/Granularity, 10))
	}
	a.mu.Lock()
	t := a.tier
	a.mu.Unlock()
	if spec.MinTimeLimit > 0 && t != nil && t.timeMin && !limit.IsUnlimited() && int64(spec.MinTimeLimit) < int64(limit) {
		// Rounded up: SLURM rounds limits up to minutes, and a pilot must
		// not be planned shorter than its smallest useful length.
		args = append(args, "--time-min="+strconv.FormatInt((int64(spec.MinTimeLimit)+Granularity-1)/Granularity, 10))
	}
	if a.cfg.Exclusive {
		args = append(args, "--exclusive")
	}
	switch pre := t.usable(); {
	case spec.Preemptible && pre != nil:
		args = append(args, "--partition="+pre.Partition)
		if pre.GraceTime > 0 {
			// With preempt_send_user_signal, SLURM sends this signal at
			// preemption, so the pilot hands its tasks back at once; it
			// also comes 30 s before the time limit, when no batch runs.
			args = append(args, "--signal=B:TERM@30")
		}
	case a.cfg.Partition != "":
		args = append(args, "--partition="+a.cfg.Partition)
	}
	if a.cfg.Account != "" {
		args = append(args, "--account="+a.cfg.Account)
	}
	if a.cfg.QOS != "" {
		args = append(args, "--qos="+a.cfg.QOS)
	}
	dir := spec.WorkDir
	if dir == "" {
		dir = a.cfg.OutputDir
	}
	if dir != "" {
		args = append(args, "--chdir="+dir)
	}
	out := spec.Output
	if out == "" && a.cfg.OutputDir != "" {
		out = filepath.Join(a.cfg.OutputDir, a.cfg.Tag+"-%j.out")
	}
	if out != "" {
		args = append(args, "--output="+out)
	}
	args = append(args, "--export="+a.cfg.Export)
	return append(args, a.cfg.SbatchArgs...)
}

// Submit submits one one-node pilot with sbatch. The limit is rounded
// down to whole minutes (under one minute is ErrInvalidSpec) and capped at
// the partition's MaxTime seen in the last snapshot; Unlimited asks for
// the partition's MaxTime, or UNLIMITED when the partition has none.
func (a *Adapter) Submit(ctx context.Context, spec adapters.PilotSpec) (adapters.PilotID, error) {
	script, err := BatchScript(a.cfg.Tag, spec)
	if err != nil {
		return "", err
	}
	if spec.Preemptible || spec.MinTimeLimit > 0 {
		// Where preemptible pilots go, and whether --time-min sizes them.
		if _, err := a.probe(ctx); err != nil {
			return "", fmt.Errorf("slurm submit: %w", err)
		}
	}
	limit := adapters.RoundDown(spec.TimeLimit, Granularity)
	if !limit.IsUnlimited() && limit < Granularity {
		return "", fmt.Errorf("%w: time limit %s is under SLURM's one minute", adapters.ErrInvalidSpec, spec.TimeLimit)
	}
	a.mu.Lock()
	maxTime := a.maxTime
	a.mu.Unlock()
	if limit.IsUnlimited() {
		// Needs the MaxTime now, not a cached one: an UNLIMITED request in
		// a partition with a MaxTime would pend forever.
		part, err := a.partition(ctx)
		if err != nil {
			return "", fmt.Errorf("slurm submit: %w", err)
		}
		limit = adapters.RoundDown(part.MaxTime, Granularity)
	} else if maxTime > 0 {
		limit = limit.Min(adapters.RoundDown(maxTime, Granularity))
	}
	args := a.SbatchArgs(limit, spec)
	name := a.cfg.binary("sbatch", a.cfg.Sbatch)

	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("slurm submit: %w", err) // nothing ran
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	// Only the head of the answer is kept: `sbatch --parsable` prints one
	// short line, and a 50 MB answer once took the agent to 1.26 GB.
	var head command.Head
	res, err := a.run(cctx, name, args, a.environ(), []byte(script), head.Consume)
	if err != nil {
		if err := a.sbatchFailure(err, res); err != nil {
			return "", err
		}
	}
	out := head.Bytes()
	if len(res.stdout) > 0 {
		out = res.stdout // a runner that returned the output whole
	}
	var id string
	if head.Cut() {
		err = parseErr("sbatch --parsable printed %d bytes, want one short line", head.Total())
	} else {
		id, err = ParseSbatch(out)
	}
	if err != nil {
		// sbatch exited 0, so the job most likely exists: the next
		// snapshot finds it by its tag.
		return "", fmt.Errorf("sbatch succeeded but: %w: %w", err, adapters.ErrOutcomeUnknown)
	}
	return adapters.PilotID(id), nil
}

// sbatchFailure classifies a failed sbatch. Only the failures where
// nothing can have been submitted are ErrUnreachable (sbatch did not
// start, or could not connect to slurmctld) or a plain rejection (sbatch
// exited with SLURM's own "error:" refusal, and no sign of a lost reply);
// every other failure is ErrOutcomeUnknown: the request may have reached
// slurmctld, and the next snapshot tells (the pilot is found by its tag).
// It returns nil for an sbatch that exited 0 but left a process holding
// its output: its answer is there to read.
func (a *Adapter) sbatchFailure(err error, res result) error {
	var ce *cmdError
	switch {
	case errors.Is(err, errStart):
		return fmt.Errorf("sbatch: %v: %w", err, adapters.ErrUnreachable)
	case errors.Is(err, command.ErrLeftover) && res.exit == 0:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("sbatch: no answer within %s, the pilot may exist: %w", a.cfg.Timeout, adapters.ErrOutcomeUnknown)
	case errors.As(err, &ce) && ce.signal != 0:
		return fmt.Errorf("sbatch was killed by signal %s, the pilot may exist: %w", ce.signal, adapters.ErrOutcomeUnknown)
	case errors.As(err, &ce):
		msg := firstErrorLine(res.stderr)
		switch {
		case bytesHasAny(res.stderr, "Unable to contact slurm controller"):
			return fmt.Errorf("sbatch: %s: %w", msg, adapters.ErrUnreachable)
		case bytesHasAny(res.stderr, unreachableMarkers...):
			// The request may have reached slurmctld before the reply was lost.
			return fmt.Errorf("sbatch: %s: %w", msg, adapters.ErrOutcomeUnknown)
		case bytesHasAny(res.stderr, "error:"):
			return fmt.Errorf("sbatch rejected the pilot (exit %d): %s", ce.code, msg)
		}
		return fmt.Errorf("sbatch exited %d without saying why (%s), the pilot may exist: %w", ce.code, msg, adapters.ErrOutcomeUnknown)
	}
	return fmt.Errorf("sbatch: %v, the pilot may exist: %w", err, adapters.ErrOutcomeUnknown)
}

// firstErrorLine picks the most telling line of sbatch's stderr: the
// last "error:" line ("Batch job submission failed: ..."), else the first.
func firstErrorLine(stderr []byte) string {
	msg := ""
	for _, l := range splitLines(stderr) {
		if strings.Contains(l, "error:") || msg == "" {
			msg = strings.TrimSpace(l)
		}
	}
	if msg == "" {
		return "no message"
	}
	return trunc(msg)
}

// finishedStates are job states after which there is nothing to cancel.
var finishedStates = map[string]bool{
	"COMPLETED": true, "CANCELLED": true, "FAILED": true, "TIMEOUT": true, "NODE_FAIL": true,
	"PREEMPTED": true, "BOOT_FAIL": true, "DEADLINE": true, "OUT_OF_MEMORY": true,
	"COMPLETING": true, "SPECIAL_EXIT": true, "REVOKED": true,
}

// Cancel cancels one pilot. It first checks with a fresh squeue that the
// job is one of ours (our user, name == tag) and refuses any other job
// with ErrNotPilot. A job that is gone or already finished is not an
// error. scancel itself is filtered by name and user too, so a job id
// reused between the check and the cancel cannot hit a foreign job.
func (a *Adapter) Cancel(ctx context.Context, id adapters.PilotID) error {
	sid := string(id)
	j, err := a.ownPilot(ctx, "cancel", sid)
	if err != nil || j == nil || finishedStates[j.State] {
		return err
	}
	var ce *cmdError
	cctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	res, err := a.run(cctx, a.cfg.binary("scancel", a.cfg.Scancel),
		[]string{"--name=" + a.cfg.Tag, "--user=" + a.user, sid}, a.environ(), nil, nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, command.ErrLeftover) && res.exit == 0:
		// scancel exited 0; a process it left held its output (killed).
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		// Cancel is idempotent, so retrying is safe.
		return fmt.Errorf("scancel %s: no answer within %s: %w", sid, a.cfg.Timeout, adapters.ErrOutcomeUnknown)
	case errors.As(err, &ce):
		switch {
		case bytesHasAny(res.stderr, "Invalid job id specified", "already completing or completed"):
			return nil
		case bytesHasAny(res.stderr, unreachableMarkers...):
			return fmt.Errorf("scancel %s: %s: %w", sid, firstErrorLine(res.stderr), adapters.ErrUnreachable)
		}
		return fmt.Errorf("scancel %s (exit %d): %s", sid, ce.code, firstErrorLine(res.stderr))
	default:
		return fmt.Errorf("scancel %s: %v: %w", sid, err, adapters.ErrUnreachable)
	}
}
