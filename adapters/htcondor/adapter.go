// Package htcondor is the harvest adapter for HTCondor pools: it reads
// condor_status and condor_q, submits pilots with condor_submit and
// removes them with condor_rm.
//
// HTCondor has no backfill reservations and no expected start times, so
// the adapter reports neither (Info.ExpectedStart and Info.Backfill are
// false); pilots get the configured maximum lifetime and the agent
// releases them when idle foreign jobs could use their machines. See
// docs/htcondor.md.
package htcondor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/command"
)

// Adapter talks to one HTCondor pool and schedd through the condor_*
// commands. Safe for concurrent use.
type Adapter struct {
	cfg Config
	// Now is the clock used when no job ad carries the schedd's time.
	Now func() time.Time
	// Log receives one line per failed command.
	Log *slog.Logger
}

var _ adapters.Adapter = (*Adapter)(nil)

// New checks cfg and returns an adapter.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SubmitUser != "" && os.Geteuid() != 0 {
		return nil, fmt.Errorf("htcondor config: submit user %q: only an agent running as root can submit as another account (leave it empty to submit as %s)", cfg.SubmitUser, currentUser())
	}
	return &Adapter{cfg: cfg, Now: time.Now, Log: slog.Default()}, nil
}

// Config returns the adapter's configuration.
func (a *Adapter) Config() Config { return a.cfg }

// Info implements adapters.Adapter. The version comes from condor_version;
// if that fails, Version is left empty rather than failing the agent's
// start: Snapshot reports an unreachable pool soon enough.
func (a *Adapter) Info(ctx context.Context) (adapters.Info, error) {
	if err := ctx.Err(); err != nil {
		return adapters.Info{}, err
	}
	info := adapters.Info{
		Name:            "htcondor",
		Tag:             a.cfg.Tag,
		TimeGranularity: 1,
		ExpectedStart:   false,
		Backfill:        false,
		SubmitsVisible:  true,
	}
	if out, err := a.run(ctx, "condor_version", nil, nil, false); err == nil {
		if v, err := ParseVersion(out); err == nil {
			info.Version = v
		}
	}
	return info, nil
}

// Snapshot implements adapters.Adapter: condor_status and condor_q run
// concurrently, and any failure of either fails the whole snapshot.
func (a *Adapter) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return cluster.Snapshot{}, fmt.Errorf("htcondor snapshot: %w", err)
	}
	format := "-" + string(a.cfg.Format)
	statusArgs := append(a.poolArgs(), format, "-attributes", strings.Join(slotAttributes, ","))
	qArgs := append(a.scheddArgs(), "-allusers", format, "-attributes", strings.Join(a.jobAttributes(), ","))

	// Each answer is parsed as it is read, one ad at a time, and bounded
	// (MaxOutput, MaxSlots, MaxJobs): never held whole.
	var (
		wg              sync.WaitGroup
		slots           []SlotAd
		jobs            []JobAd
		statusErr, qErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		statusErr = a.query(ctx, "condor_status", statusArgs, func(r io.Reader) (err error) {
			slots, err = ReadCondorStatus(r, a.cfg.Format, a.cfg.MaxSlots)
			return tooMany(err, "max_slots")
		})
	}()
	go func() {
		defer wg.Done()
		qErr = a.query(ctx, "condor_q", qArgs, func(r io.Reader) (err error) {
			jobs, err = ReadCondorQ(r, a.cfg.Format, a.cfg.LimitAttributes, a.cfg.MaxJobs)
			return tooMany(err, "max_jobs")
		})
	}()
	wg.Wait()
	if err := errors.Join(queryFailed(statusErr), queryFailed(qErr)); err != nil {
		return cluster.Snapshot{}, fmt.Errorf("htcondor snapshot: %w", err)
	}
	return BuildSnapshot(slots, jobs, View{
		Owner:       a.pilotOwner(),
		Tag:         a.cfg.Tag,
		Now:         a.Now().Unix(),
		MaxLifetime: pilotLifetime(cluster.Unlimited, a.cfg.MaxLifetime),
	})
}

// tooMany names the option that bounds a refused answer's ads.
func tooMany(err error, option string) error {
	if err != nil && errors.Is(err, errTooManyAds) {
		return fmt.Errorf("%w (the %s option)", err, option)
	}
	return err
}

// query runs a read-only condor_* command whose output parse reads as it
// comes. A parse error (ErrMalformed) stops the command and is returned
// as it is: the pool answered, with something this adapter cannot trust.
func (a *Adapter) query(ctx context.Context, name string, args []string, parse func(io.Reader) error) error {
	_, err := a.exec(ctx, name, args, nil, false, parse)
	return err
}

// queryFailed marks a query that exited non-zero as unreachable: the
// pool could not be asked, whatever the reason.
func queryFailed(err error) error {
	var cf *commandFailed
	if errors.As(err, &cf) {
		return fmt.Errorf("%w: %w", adapters.ErrUnreachable, err)
	}
	return err
}

func (a *Adapter) jobAttributes() []string {
	return append(append([]string(nil), jobAttributes...), a.cfg.LimitAttributes...)
}

// Submit implements adapters.Adapter: one condor_submit -terse with the
// description on stdin.
func (a *Adapter) Submit(ctx context.Context, spec adapters.PilotSpec) (adapters.PilotID, error) {
	desc, err := SubmitDescription(a.cfg, spec)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("htcondor submit: %w", err)
	}
	args := append(a.scheddArgs(), "-terse", "-")
	// Only the head of the answer is kept: -terse prints one short line,
	// and a 50 MB answer would be held whole otherwise.
	var head command.Head
	if _, err := a.exec(ctx, "condor_submit", args, []byte(desc), true, head.Consume); err != nil {
		return "", fmt.Errorf("htcondor submit: %w", err)
	}
	id, err := ParseSubmit(head.Bytes())
	if err == nil && head.Cut() {
		err = malformed("condor_submit -terse printed %d bytes, want one short line", head.Total())
	}
	if err != nil {
		// condor_submit said yes but not which job: it may well exist.
		return "", fmt.Errorf("htcondor submit: %w: %w", adapters.ErrOutcomeUnknown, err)
	}
	return adapters.PilotID(id), nil
}

var pilotIDRE = regexp.MustCompile(`^(\d{1,18})\.(\d{1,18})$`)

// Cancel implements adapters.Adapter. condor_rm is given a constraint
// that names the job AND the tag, so a foreign job can never be removed,
// even if its id was reused. When nothing matched, condor_q tells a
// pilot already gone (not an error) from a foreign job (ErrNotPilot).
// Shrink is not supported: HTCondor has no batch plan that a pilot's end
// could free nodes in (Info.Shrink is false).
func (a *Adapter) Shrink(context.Context, adapters.PilotID, int64) error {
	return fmt.Errorf("htcondor: shrink: %w", adapters.ErrNotImplemented)
}

func (a *Adapter) Cancel(ctx context.Context, id adapters.PilotID) error {
	m := pilotIDRE.FindStringSubmatch(string(id))
	if m == nil {
		return fmt.Errorf("htcondor cancel %q: %w: not an HTCondor job id (cluster.proc)", id, adapters.ErrNotPilot)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("htcondor cancel %s: %w", id, err)
	}
	owner := a.pilotOwner()
	constraint := fmt.Sprintf(`ClusterId == %s && ProcId == %s && %s =?= %q && Owner =?= %q`, m[1], m[2], attrPilot, a.cfg.Tag, owner)
	args := append(a.scheddArgs(), "-constraint", constraint)
	_, rmErr := a.run(ctx, "condor_rm", args, nil, true)
	if rmErr == nil {
		return nil
	}
	var cf *commandFailed
	if !errors.As(rmErr, &cf) {
		return fmt.Errorf("htcondor cancel %s: %w", id, rmErr) // unreachable or outcome unknown
	}
	// Nothing matched (or condor_rm refused): ask the queue what the job is.
	// -allusers: a foreign job must be seen to be refused as one.
	qArgs := append(a.scheddArgs(), "-allusers", "-"+string(a.cfg.Format), "-attributes", "ClusterId,ProcId,JobStatus,Owner,"+attrPilot, string(id))
	out, err := a.run(ctx, "condor_q", qArgs, nil, false)
	if err != nil {
		return fmt.Errorf("htcondor cancel %s: %w (after condor_rm: %v)", id, err, rmErr)
	}
	jobs, err := ParseCondorQ(out, a.cfg.Format, nil)
	if err != nil {
		return fmt.Errorf("htcondor cancel %s: %w", id, err)
	}
	for _, j := range jobs {
		if j.ID() != string(id) {
			continue
		}
		switch {
		case j.PilotTag != a.cfg.Tag || j.Owner != owner:
			return fmt.Errorf("htcondor cancel %s: %w", id, adapters.ErrNotPilot)
		case j.Status == statusRemoved || j.Status == statusCompleted:
			return nil // already on its way out
		default:
			return fmt.Errorf("htcondor cancel %s: pilot still queued: %w", id, rmErr)
		}
	}
	return nil // not in the queue: already gone
}

func (a *Adapter) poolArgs() []string {
	if a.cfg.Pool != "" {
		return []string{"-pool", a.cfg.Pool}
	}
	return nil
}

func (a *Adapter) scheddArgs() []string {
	args := a.poolArgs()
	if a.cfg.Schedd != "" {
		args = append(args, "-name", a.cfg.Schedd)
	}
	return args
}

// commandFailed is a condor_* command that ran and exited non-zero for a
// reason other than an unreachable daemon. output is a one-line excerpt.
type commandFailed struct {
	cmd    string
	code   int
	output string
}

func (e *commandFailed) Error() string {
	return fmt.Sprintf("%s exited %d: %s", e.cmd, e.code, e.output)
}

// unreachableRE matches what the condor tools print when a daemon cannot
// be reached (texts from HTCondor's sources): nothing was done.
var unreachableRE = regexp.MustCompile(`(?i)couldn't contact the condor_collector|failed to connect to|can't find address of|failed to fetch ads from|unable to locate|CEDAR:6001|SECMAN:2007|connection refused`)

// run runs one condor_* command under the configured timeout, in its own
// process group (see internal/command). mutating says whether a failure
// after the start may have changed something (submit, rm): then a
// timeout or a signal is ErrOutcomeUnknown; for queries it is
// ErrUnreachable (nothing happened, try again).
func (a *Adapter) run(ctx context.Context, name string, args []string, stdin []byte, mutating bool) ([]byte, error) {
	return a.exec(ctx, name, args, stdin, mutating, nil)
}

// exec is run, with parse (when not nil) reading the output as it comes.
func (a *Adapter) exec(ctx context.Context, name string, args []string, stdin []byte, mutating bool, parse func(io.Reader) error) ([]byte, error) {
	path := name
	if a.cfg.BinDir != "" {
		path = filepath.Join(a.cfg.BinDir, name)
	}
	if name == "condor_submit" && a.cfg.SubmitUser != "" {
		// runuser keeps the environment (CONDOR_CONFIG) and passes the
		// command's exit status through.
		if a.cfg.BinDir == "" {
			if p, err := exec.LookPath(name); err == nil {
				path = p
			}
		}
		args = append([]string{"-u", a.cfg.SubmitUser, "--", path}, args...)
		path = "runuser"
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CommandTimeout)
	defer cancel()
	res, err := command.Run(cctx, command.Spec{Path: path, Args: args, Stdin: stdin, Stdout: parse,
		MaxOutput: a.cfg.MaxOutput, WaitDelay: 2 * time.Second})
	var ee *command.ExitError
	switch {
	case errors.Is(err, ErrMalformed):
		return nil, fmt.Errorf("%s: %w", name, err)
	case errors.Is(err, command.ErrOutputTooLarge):
		return nil, fmt.Errorf("%s: %w: printed more than the %d MiB the max_output_mb option allows", name, adapters.ErrUnreachable, a.cfg.MaxOutput>>20)
	case err == nil:
		return res.Stdout, nil
	case errors.Is(err, command.ErrStart):
		return nil, fmt.Errorf("%s: %w: %v", name, adapters.ErrUnreachable, err)
	case errors.Is(err, command.ErrLeftover) && res.ExitCode == 0:
		// A process it started held the pipe; the command itself exited 0
		// and its answer is complete (that process group was killed).
		return res.Stdout, nil
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		cause := cctx.Err()
		if ctx.Err() != nil {
			cause = ctx.Err()
		}
		if mutating {
			return nil, fmt.Errorf("%s: %w: interrupted after it started (%v)", name, adapters.ErrOutcomeUnknown, cause)
		}
		return nil, fmt.Errorf("%s: %w: %v", name, adapters.ErrUnreachable, cause)
	case !errors.As(err, &ee):
		// The output went past the cap, or another failure after the start.
		if mutating {
			return nil, fmt.Errorf("%s: %w: %v", name, adapters.ErrOutcomeUnknown, err)
		}
		return nil, fmt.Errorf("%s: %w: %v", name, adapters.ErrUnreachable, err)
	}
	msg := strings.TrimSpace(string(res.Stderr) + "\n" + string(res.Stdout))
	// Debug: some failures are expected (condor_rm of a pilot already
	// gone); callers return what matters and the agent logs it.
	a.Log.Debug("condor command failed", "command", name, "args", strings.Join(args, " "), "error", err, "output", command.Excerpt(msg, 2000))
	switch {
	case ee.Signal != 0 && mutating:
		return nil, fmt.Errorf("%s: %w: killed by signal %s after it started", name, adapters.ErrOutcomeUnknown, ee.Signal)
	case unreachableRE.MatchString(msg):
		return nil, fmt.Errorf("%s: %w: %s", name, adapters.ErrUnreachable, command.Excerpt(msg, errorExcerpt))
	}
	return nil, &commandFailed{cmd: name, code: ee.Code, output: command.Excerpt(msg, errorExcerpt)}
}

// pilotOwner is the account pilots are submitted as, which owns them.
func (a *Adapter) pilotOwner() string {
	if a.cfg.SubmitUser != "" {
		return a.cfg.SubmitUser
	}
	return currentUser()
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprintf("uid %d", os.Geteuid())
}

// errorExcerpt is how much of a command's output an error quotes, on one
// line: enough for HTCondor's message, never a page of output.
const errorExcerpt = 300
