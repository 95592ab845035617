// Package pilot is what runs inside every pilot job (`harvest pilot`): it
// asks the queue for the master lease; the winner runs the master plus a
// side worker (cores - 1), the others run a worker for the master the
// lease names. A worker whose master is lost goes back to the lease, so
// one of the survivors becomes the next master.
package pilot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/worker/confine"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Pilot is one pilot process.
type Pilot struct {
	cfg Config
	q   master.Queue
	log *slog.Logger
	url string // advertised

	mu       sync.Mutex
	m        *master.Master
	mh       http.Handler
	starting chan struct{} // closed when a lease request in flight is settled (and the master it won is up, or failed)
	mcancel  context.CancelFunc
	mdone    chan struct{}

	// A master that could not start (a full or unwritable state
	// directory) has this pilot ask for the lease again only after a
	// back-off: each grant is a new epoch, and a failing pilot asking at
	// the worker's pace took one every few seconds.
	now       func() time.Time // time.Now; tests inject a clock
	startBO   *backoff.ExponentialBackOff
	notBefore time.Time // no lease question before this
	whyNot    error     // the last failed start
}

// Back-off between failed master starts: 5 s, growing to a minute (a
// pilot held off does not work for another master either: see resolve).
const (
	startRetryFirst = 5 * time.Second
	startRetryMax   = time.Minute
)

func newStartBackOff() *backoff.ExponentialBackOff {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = startRetryFirst, startRetryMax, 0
	bo.Reset()
	return bo
}

// Run runs the pilot until ctx ends (SIGTERM) or the deadline (minus
// StopBefore): the worker stops and reports its tasks as interrupted, then
// the master (if this pilot is master) hands its unstarted tasks back and
// flushes its results.
func Run(ctx context.Context, cfg Config, q master.Queue) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("pilot: listen %s: %w", cfg.Listen, err)
	}
	p := &Pilot{cfg: cfg, q: q, log: cfg.Logger.With("component", "pilot", "pilot", cfg.PilotID), now: time.Now, startBO: newStartBackOff()}
	p.url, err = advertiseURL(cfg.Advertise, ln.Addr())
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	// The pilot stops StopBefore its deadline; the agent may pull the
	// deadline in (the master passes it on), never push it out.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := &stopTimer{cancel: cancel}
	defer stop.close()
	if !cfg.Deadline.IsZero() {
		stop.at(cfg.Deadline.Add(-cfg.StopBefore))
	}
	wc := cfg.Worker
	wc.OnDeadline = func(t time.Time) {
		p.log.Info("pilot end pulled in", "deadline", t)
		stop.at(t.Add(-cfg.StopBefore))
	}
	wc.ID = cfg.PilotID + "-" + randomHex(4)
	wc.PilotID, wc.Slots, wc.Deadline, wc.Token, wc.Address = cfg.PilotID, cfg.Slots, cfg.Deadline, cfg.Token, p.url
	if wc.Runner == nil {
		if wc.Runner, wc.Confinement, err = p.taskRunner(); err != nil {
			return err
		}
	}
	if wc.Logger == nil {
		wc.Logger = cfg.Logger
	}
	w, err := worker.New(wc, p.resolve)
	if err != nil {
		return err
	}
	p.log.Info("pilot starts", "address", p.url, "slots", cfg.Slots, "deadline", cfg.Deadline, "tasks_confined", wc.Confinement)
	err = w.Run(ctx)
	p.stopMaster()
	p.log.Info("pilot stops", "tasks_run", w.Finished())
	return err
}

// taskRunner makes the runner of real tasks: confined where it can be
// (and said so), inputs inside the roots.
func (p *Pilot) taskRunner() (worker.Runner, string, error) {
	r := worker.DefaultExecRunner()
	r.Site, r.Pilot = p.cfg.Site, p.cfg.PilotID
	for _, d := range p.cfg.TaskRoots {
		// The queue stores resolved paths: compare like with like.
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			return nil, "", fmt.Errorf("pilot: task root %s: %w", d, err)
		}
		r.Roots = append(r.Roots, real)
	}
	r.Read, r.LogMax = p.cfg.TaskRead, p.cfg.TaskLogMax
	sup := confine.Probe()
	mode := p.cfg.Confine
	desc := sup.Describe(mode)
	if mode != confine.ModeOff {
		l, err := confine.Self(mode)
		if err != nil {
			return nil, "", err
		}
		r.Jail = l
	}
	if !sup.Confined(mode) {
		p.log.Warn("tasks are not confined: they can read and write whatever this pilot's account can", "why", desc)
	} else if state, err := filepath.EvalSymlinks(p.cfg.StateDir); err == nil && safefs.Within(state, append(append(append([]string(nil), r.Roots...), r.Read...), confine.SystemRead...)) {
		p.log.Warn("tasks can read the state directory (it lies in a directory they may read): move it", "state_dir", state)
	}
	return r, desc, nil
}

// ServeHTTP routes worker requests to the master while this pilot is one,
// and answers a new master's probe (master.PathAlive).
func (p *Pilot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == master.PathAlive {
		// A new master asks whether this pilot still runs: at once,
		// whatever the pilot is doing.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	p.mu.Lock()
	h, starting := p.mh, p.starting
	p.mu.Unlock()
	if h == nil && starting != nil {
		// Our lease request is on its way, or we just won the lease and
		// the master is opening its checkpoint: workers that learnt our
		// address wait a moment instead of bouncing back to the lease.
		t := time.NewTimer(10 * time.Second)
		select {
		case <-starting:
		case <-r.Context().Done():
		case <-t.C:
		}
		t.Stop()
		p.mu.Lock()
		h = p.mh
		p.mu.Unlock()
	}
	if h == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "{\"error\":%q}\n", workerproto.ErrNotMaster)
		return
	}
	h.ServeHTTP(w, r)
}

// resolve finds the master for this pilot's worker: our own master if we
// run one, else the lease (which may make us master). A holder whose
// address refuses connections is dead (kill -9): its lease runs out
// without renewal, so resolve waits for that and asks again, instead of
// sending the worker to a dead address.
func (p *Pilot) resolve(ctx context.Context) (worker.Endpoint, error) {
	side := max(1, p.cfg.Slots-1)
	var waitedFor int64 // the epoch whose end we are waiting for (logged once)
	for {
		p.mu.Lock()
		running := p.m != nil
		p.mu.Unlock()
		if running {
			return worker.Endpoint{URL: p.url, Slots: side}, nil
		}
		// After a failed master start the lease is not asked until the
		// back-off ends: any question may be granted (a new epoch). The
		// worker serves another pilot's master meanwhile, found by a
		// question that grants nothing; it waits only while there is none.
		if err := p.holdingOff(); err != nil {
			if ep, ok := p.otherMaster(ctx); ok {
				return ep, nil
			}
			return worker.Endpoint{}, err
		}
		l, err := p.askLease(ctx)
		if err != nil {
			return worker.Endpoint{}, err
		}
		if l.Granted {
			return worker.Endpoint{URL: p.url, Slots: side}, nil
		}
		if p.usable(l) && l.Holder != p.cfg.PilotID && !master.NothingListens(ctx, l.Address) {
			return worker.Endpoint{URL: l.Address, Slots: p.cfg.Slots}, nil
		}
		// The holder is dead, or is our own former master: nobody renews
		// its lease. Ask again when it runs out, then every LeasePoll.
		expires := time.Unix(l.ExpiresAt, 0)
		if l.LeftMS > 0 {
			// Measured from our receipt of the answer: no earlier than the
			// queue's expiry, whatever the clocks say.
			expires = time.Now().Add(time.Duration(l.LeftMS) * time.Millisecond)
		}
		if waitedFor != l.Epoch {
			waitedFor = l.Epoch
			p.log.Info("master unreachable; waiting for its lease to run out", "holder", l.Holder, "epoch", l.Epoch, "expires", expires)
		}
		wait := min(max(time.Until(expires), p.cfg.LeasePoll), p.cfg.LeaseRetry)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return worker.Endpoint{}, ctx.Err()
		case <-t.C:
		}
	}
}

// askLease asks the queue for the lease and, if granted, starts the
// master. Workers that reach this pilot meanwhile wait for the outcome
// (ServeHTTP): once the queue granted the lease, others learn this
// pilot's address before its answer arrives here, and would otherwise be
// told "not the master" and back off. If the master cannot start (a
// checkpoint it cannot open), the lease is given up at once so another
// pilot can try.
func (p *Pilot) askLease(ctx context.Context) (pilotproto.Lease, error) {
	ready := make(chan struct{})
	p.mu.Lock()
	p.starting = ready
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.starting = nil
		p.mu.Unlock()
		close(ready)
	}()
	asked := time.Now()
	l, err := p.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: p.cfg.PilotID, Address: p.url})
	if err != nil {
		return l, fmt.Errorf("lease: %w", err)
	}
	if !l.Granted {
		return l, nil
	}
	if err := p.startMaster(l, asked); err != nil {
		if _, rerr := p.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: p.cfg.PilotID, Address: p.url, Epoch: l.Epoch, Release: true}); rerr != nil {
			p.log.Warn("could not give the lease up after a failed start", "epoch", l.Epoch, "error", rerr)
		}
		p.failedStart(l.Epoch, err)
		return l, err
	}
	p.mu.Lock()
	p.startBO.Reset()
	p.mu.Unlock()
	return l, nil
}

// failedStart says why this pilot cannot be master and holds it off the
// lease for the next back-off.
func (p *Pilot) failedStart(epoch int64, err error) {
	p.mu.Lock()
	wait := p.startBO.NextBackOff()
	p.notBefore, p.whyNot = p.now().Add(wait), err
	p.mu.Unlock()
	if errors.Is(err, master.ErrStateDir) {
		p.log.Error("cannot be master: the state directory cannot hold the checkpoint (full, read-only or not writable by this account); free space or fix it. Not asking for the lease meanwhile",
			"state_dir", p.cfg.StateDir, "epoch", epoch, "error", err, "retry_in", wait.Round(time.Second))
		return
	}
	p.log.Error("cannot be master; not asking for the lease meanwhile", "state_dir", p.cfg.StateDir, "epoch", epoch, "error", err, "retry_in", wait.Round(time.Second))
}

// otherMaster finds, without asking for the lease, a live master of
// another pilot that answers at its address (Peek). A queue older than
// Peek refuses the question (400: unknown field); were a queue to grant
// it as a plain one, the lease is given back at once, as after a failed
// start.
func (p *Pilot) otherMaster(ctx context.Context) (worker.Endpoint, bool) {
	l, err := p.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: p.cfg.PilotID, Address: p.url, Peek: true})
	if err != nil {
		return worker.Endpoint{}, false
	}
	if l.Granted {
		if _, err := p.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: p.cfg.PilotID, Address: p.url, Epoch: l.Epoch, Release: true}); err != nil {
			p.log.Warn("could not give back a lease a peek was granted (a queue older than this pilot)", "epoch", l.Epoch, "error", err)
		}
		return worker.Endpoint{}, false
	}
	if !p.usable(l) || l.Holder == p.cfg.PilotID || l.LeftMS <= 0 || master.NothingListens(ctx, l.Address) {
		return worker.Endpoint{}, false
	}
	return worker.Endpoint{URL: l.Address, Slots: p.cfg.Slots}, true
}

// holdingOff is why this pilot does not ask for the lease now (nil: it may).
func (p *Pilot) holdingOff() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if left := p.notBefore.Sub(p.now()); left > 0 {
		return fmt.Errorf("not asking for the master lease for %s: the last master start failed: %w", left.Round(time.Second), p.whyNot)
	}
	return nil
}

// startMaster runs the master of the lease l, asked for at asked (the
// lease runs at least TTL from then).
func (p *Pilot) startMaster(l pilotproto.Lease, asked time.Time) error {
	epoch := l.Epoch
	mc := p.cfg.Master
	mc.PilotID, mc.Address, mc.Epoch, mc.Token = p.cfg.PilotID, p.url, epoch, p.cfg.Token
	mc.LeaseTTL = time.Duration(l.TTLMS) * time.Millisecond
	if mc.LeaseTTL == 0 {
		mc.LeaseTTL = time.Duration(l.TTLSecond) * time.Second
	}
	mc.CheckpointDir, mc.LeaseSince = p.cfg.StateDir, asked
	if mc.Logger == nil {
		mc.Logger = p.cfg.Logger
	}
	m, err := master.New(mc, p.q)
	if err != nil {
		return fmt.Errorf("start master: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	p.mu.Lock()
	p.m, p.mh, p.mcancel, p.mdone = m, m.Handler(), cancel, done
	p.mu.Unlock()
	p.log.Info("became master", "epoch", epoch, "checkpoint", filepath.Join(mc.CheckpointDir, master.FileName(epoch)))
	go func() {
		defer close(done)
		err := m.Run(ctx)
		p.mu.Lock()
		p.m, p.mh = nil, nil
		p.mu.Unlock()
		if err != nil && !errors.Is(err, context.Canceled) {
			p.log.Warn("master ended; back to worker", "epoch", epoch, "error", err)
		}
	}()
	return nil
}

func (p *Pilot) stopMaster() {
	p.mu.Lock()
	cancel, done := p.mcancel, p.mdone
	p.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// usable reports whether the worker may go to the master address l
// holds: its workers send it the pilot token, so one the queue would now
// refuse (pilotproto.CheckAddress: stored by an older queue) is not
// followed, and the pilot waits for the lease as when nobody listens.
func (p *Pilot) usable(l pilotproto.Lease) bool {
	if l.Address == "" {
		return false
	}
	if err := pilotproto.CheckAddress(l.Address); err != nil {
		p.log.Warn("the master's address in the lease is not usable", "holder", l.Holder, "error", err)
		return false
	}
	return true
}

// advertiseURL is the URL other pilots reach this one at.
func advertiseURL(advertise string, addr net.Addr) (string, error) {
	port := strconv.Itoa(addr.(*net.TCPAddr).Port)
	if advertise != "" {
		if _, _, err := net.SplitHostPort(advertise); err != nil {
			advertise = net.JoinHostPort(advertise, port)
		}
		u := "http://" + advertise
		if err := pilotproto.CheckAddress(u); err != nil {
			// The queue would refuse it as the master's address.
			return "", fmt.Errorf("pilot: --advertise %q: %w", advertise, err)
		}
		return u, nil
	}
	host := addr.(*net.TCPAddr).IP
	if !host.IsUnspecified() {
		return "http://" + net.JoinHostPort(host.String(), port), nil
	}
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("pilot: hostname for the advertised address: %w", err)
	}
	return "http://" + net.JoinHostPort(name, port), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// errDeadline is why a pilot stops at its deadline.
var errDeadline = errors.New("pilot deadline reached")

// stopTimer cancels the pilot at its deadline, which may move earlier.
type stopTimer struct {
	mu     sync.Mutex
	t      *time.Timer
	when   time.Time
	cancel context.CancelCauseFunc
}

// at sets the stop time to when if it comes before the current one.
func (s *stopTimer) at(when time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t != nil && !when.Before(s.when) {
		return
	}
	if s.t != nil {
		s.t.Stop()
	}
	s.when = when
	s.t = time.AfterFunc(time.Until(when), func() { s.cancel(errDeadline) })
}

func (s *stopTimer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t != nil {
		s.t.Stop()
	}
}
