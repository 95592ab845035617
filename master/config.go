package master

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/master/core"
)

// Config of a master. Only cmd/ maps flags and environment onto it.
type Config struct {
	PilotID       string // batch system id of the pilot running this master
	Address       string // URL published with the lease ("http://host:port")
	Epoch         int64  // lease epoch this master was granted
	CheckpointDir string // the shared state directory: master-<epoch>.db
	JournalMode   string // SQLite rollback journal mode: TRUNCATE (default) or DELETE; WAL is refused
	// LeaseSince is when the lease request that granted Epoch was sent:
	// the lease runs at least until LeaseSince + LeaseTTL, and the
	// master stops writing before that unless it renewed (zero: until
	// the first renewal, no deadline).
	LeaseSince time.Time
	Token      string // pilot token workers must present
	// CommitDelay is how long the master may hold the checkpoint ops of
	// a request to commit them with those of the requests that follow
	// (group commit): a transaction's fixed cost (the journal, its sync and
	// the pages' write) is paid once for all of them. The replies
	// wait for the commit, so this is latency added to a worker's round
	// trip; 0: commit at once (a commit in flight still groups what comes
	// meanwhile).
	CommitDelay time.Duration

	PullWait           time.Duration // longest worker long-poll
	Prefetch           int           // task buffer = Prefetch x the workers' capacity
	MinBuffer          int           // buffer floor (before workers register)
	MaxBuffer          int           // buffer ceiling
	MaxPull            int           // tasks per queue pull
	IdlePoll           time.Duration // pull interval while the queue has nothing
	RetryInterval      time.Duration // wait after a failed queue call
	HeartbeatInterval  time.Duration // queue heartbeat + recommendation period
	LeaseRenewInterval time.Duration // lease renewal period, at most: the master renews at least every TTL/3
	LeaseTTL           time.Duration // the TTL the queue granted (0: learnt from the first renewal)
	WorkerTimeout      time.Duration // a silent worker's tasks are requeued after this
	ReconnectGrace     time.Duration // after a restore, workers have this long to come back
	// Probe is how a new master asks the pilots of restored workers
	// whether they still run: the batches of a pilot that is gone (its
	// port refuses, or its host answers nothing Probe.Silences times in
	// a row) go back to the queue at once, not after ReconnectGrace.
	Probe           ProbeRule
	SafetyMargin    time.Duration          // no batch may be planned to end later than deadline - margin
	ReportBatch     int                    // results per queue report
	ReportDelay     time.Duration          // a result waits this long at most for others to join its report (core.Config)
	RefillPercent   int                    // pull once the pending tasks are this many percent short of the buffer (core.Config)
	ShutdownTimeout time.Duration          // time to flush results and release the lease when stopping
	HandBackWait    time.Duration          // a stopping master takes hand-backs this long while workers hold batches (core.Config)
	Recommend       policy.RecommendConfig // the MiniNode mapping (one, shared with the agent and the simulator)
	// Capacity is the degradation-aware capacity rule: the pool stops
	// growing where its tasks slow down (package capacity). Nil: off.
	Capacity *capacity.Config

	Now    func() time.Time
	Logger *slog.Logger
}

// DefaultConfig returns production defaults; PilotID, Address, Epoch,
// CheckpointDir and Token must be set.
func DefaultConfig() Config {
	return Config{
		JournalMode: DefaultJournal,
		// 1 ms groups the ops of about 8 no-op tasks per transaction in
		// `harvest bench dispatch --in-memory` (1,000 jobs; 0: about 2),
		// and is nothing beside a real task's run time.
		CommitDelay:       time.Millisecond,
		PullWait:          20 * time.Second,
		Prefetch:          2,
		MinBuffer:         64,
		MaxBuffer:         20000,
		MaxPull:           2000,
		IdlePoll:          time.Second,
		RetryInterval:     time.Second,
		HeartbeatInterval: 10 * time.Second,
		// One renewal a second (a write at the queue, one per site): with
		// the queue's 4 s TTL a kill -9 of the master's pilot leaves at
		// most 4 s of lease, and the master, which stops writing its
		// checkpoint 3 s after a renewal's request (holdFor), survives two
		// lost renewals.
		LeaseRenewInterval: time.Second,
		WorkerTimeout:      60 * time.Second,
		ReconnectGrace:     30 * time.Second,
		// Two silent probes of 750 ms in a row: a live host's kernel
		// answers the TCP handshake within a LAN's round trip whatever
		// its load, and its pilot answers PathAlive without waiting for
		// anything; one lost SYN (retransmitted after 1 s) spoils one
		// probe, not two. A silent host's batch goes back to the queue
		// 1.5 s after the restore instead of 30.
		Probe:        ProbeRule{Timeout: 750 * time.Millisecond, Silences: 2, Tries: 4},
		SafetyMargin: 60 * time.Second,
		ReportBatch:  1000,
		// A result waits at most 50 ms for others to join its queue
		// report (it is in the checkpoint meanwhile): with real tasks of a
		// few ms, about 20 reports a second of tens of results each
		// instead of one per answered report of a handful (each a request
		// and a fenced transaction at the queue; 100 ms halved the queue's
		// results calls again in `harvest bench dispatch --exec --slots 1`,
		// but a task counts against its owner's running quota until its
		// result is applied, so a longer wait slows quota-bound users of
		// short tasks).
		ReportDelay: 50 * time.Millisecond,
		// Pulls of at least half the buffer: with real tasks the master
		// pulled 13-15 tasks at a time at 0% (a queue transaction each),
		// and at 25% one batch of `harvest bench dispatch --exec` per
		// pull (its buffer is 4 batches); at 50%, two.
		RefillPercent:   50,
		ShutdownTimeout: 5 * time.Second,
		// Pilots preempted together handed back 10 and 78 ms after the
		// master's own stop on the mini-cluster (the demo); the wait ends
		// as soon as no worker holds a batch, and holds the master's node
		// at most this long when other workers keep running.
		HandBackWait: 300 * time.Millisecond,
		Recommend:    policy.DefaultRecommendConfig(),
		Capacity:     defaultCapacity(),
		Now:          time.Now,
		Logger:       slog.Default(),
	}
}

func defaultCapacity() *capacity.Config {
	c := capacity.DefaultConfig()
	return &c
}

// ErrInvalidConfig marks configuration errors.
var ErrInvalidConfig = errors.New("invalid master config")

// Validate reports the first problem.
func (c Config) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(f, a...)) }
	switch {
	case c.PilotID == "":
		return bad("pilot id is empty")
	case c.Epoch <= 0:
		return bad("epoch %d: a master needs a granted lease", c.Epoch)
	case c.CheckpointDir == "":
		return bad("checkpoint directory is empty")
	case CheckJournal(c.JournalMode) != nil:
		return bad("%v", CheckJournal(c.JournalMode))
	case c.Token == "":
		return bad("pilot token is empty")
	case c.Prefetch < 1 || c.MinBuffer < 1 || c.MaxBuffer < c.MinBuffer || c.MaxPull < 1 || c.ReportBatch < 1:
		return bad("buffer sizes must be positive and MaxBuffer >= MinBuffer")
	case c.ReportDelay < 0 || c.ReportDelay > time.Second || c.RefillPercent < 0 || c.RefillPercent > 90:
		return bad("report delay must be 0..1s and refill percent 0..90")
	case c.PullWait <= 0 || c.IdlePoll <= 0 || c.RetryInterval <= 0 || c.HeartbeatInterval <= 0 ||
		c.LeaseRenewInterval <= 0 || c.LeaseTTL < 0 || c.WorkerTimeout <= 0 || c.ReconnectGrace < 0 || c.SafetyMargin < 0 || c.ShutdownTimeout <= 0 || c.HandBackWait < 0 || c.HandBackWait >= c.ShutdownTimeout ||
		c.CommitDelay < 0 || c.CommitDelay > time.Second:
		return bad("durations must be positive (hand-back wait: not negative, under the shutdown timeout; commit delay: 0..1s)")
	case c.Probe.Timeout <= 0 || c.Probe.Silences < 1 || c.Probe.Tries < c.Probe.Silences:
		return bad("probe: timeout must be positive, silences at least 1, tries at least the silences")
	case c.WorkerTimeout <= c.PullWait:
		return bad("worker timeout %s must exceed the pull wait %s", c.WorkerTimeout, c.PullWait)
	case c.Now == nil || c.Logger == nil:
		return bad("Now and Logger must be set")
	}
	if c.Capacity != nil {
		if err := c.Capacity.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return c.Recommend.Validate()
}

// core is the part of the configuration the state machine decides with.
func (c Config) core() core.Config {
	return core.Config{
		PilotID: c.PilotID, Address: c.Address, Epoch: c.Epoch,
		PullWait: c.PullWait, Prefetch: c.Prefetch, MinBuffer: c.MinBuffer, MaxBuffer: c.MaxBuffer, MaxPull: c.MaxPull,
		IdlePoll: c.IdlePoll, RetryInterval: c.RetryInterval, HeartbeatInterval: c.HeartbeatInterval,
		LeaseRenewInterval: c.LeaseRenewInterval, LeaseTTL: c.LeaseTTL, WorkerTimeout: c.WorkerTimeout,
		ReconnectGrace: c.ReconnectGrace, SafetyMargin: c.SafetyMargin, ReportBatch: c.ReportBatch, HandBackWait: c.HandBackWait,
		ReportDelay: c.ReportDelay, RefillPercent: c.RefillPercent,
		Recommend: c.Recommend, Capacity: c.Capacity, Logger: c.Logger,
	}
}
