package queue

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/harvest-hpc/harvest/internal/unixacct"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/siteshare"
)

// Config configures the queue. Only cmd/ maps flags and environment onto it.
type Config struct {
	// DBPath is the SQLite file (WAL mode; the -wal and -shm files sit
	// next to it), or a postgres:// URL of a PostgreSQL database that
	// several agents may share.
	DBPath string
	// AllowedRoots are the directories datasets and output directories
	// must lie in (after symlinks are resolved). At least one.
	AllowedRoots []string
	// OutputsRoot, when set, holds the default output directories
	// (OutputsRoot/<user>/job-<id>); otherwise a job's default output
	// directory is <dataset>.out-<id> next to the dataset. A default name
	// that exists already gives way to the next free one (<name>.2, ...).
	OutputsRoot string
	// PilotToken authenticates the local site's pilots (the agent hands it
	// to pilot jobs as HARVEST_PILOT_TOKEN). Other sites' agents register
	// their own. Empty: no local pilots.
	PilotToken string
	// LocalSite is the name of the site whose agent hosts the queue (its
	// pool's pilots present PilotToken). Default "local".
	LocalSite string
	// Shared says several agents serve this database (each its own site):
	// the sweeps run at one agent at a time (the sweep lease), a
	// submission half stored at start is left to its agent (removed only
	// once older than StaleSubmission), the local pilot token is stored
	// so that every agent serves this site's pilots, and the in-memory
	// mirror is rebuilt every ReconcileInterval (set it short: it is how
	// an agent learns of the others' submissions and cancels).
	Shared bool
	// ClaimWait is how long a queue on PostgreSQL asks for its claim of
	// the database (store.Claim: alone, or shared when Shared) before it
	// refuses to start: a restarted agent's old session may not be gone.
	ClaimWait time.Duration
	// SweepHolder names this agent in the sweep lease (Shared; default:
	// the site, the host and the process id).
	SweepHolder string
	// StaleSubmission is how long a shared database's submission may stay
	// half stored before the sweeping agent removes it (its agent died).
	StaleSubmission time.Duration
	// Sites tunes how the work is split among several sites.
	Sites siteshare.Config
	// Admins are user names that are admin on the Unix socket (root always is).
	Admins []string

	MinBatchSize, MaxBatchSize int
	DefaultMaxAttempts         int
	DefaultExpiry              time.Duration // a job still waiting after this is ERROR_EW
	Retention                  time.Duration // final jobs are purged after this
	MaxTasksPerJob             int
	// MaxUnfinishedPerUser caps a user's unfinished tasks (waiting or
	// running, over their live jobs) a new job may bring them to; 0: no
	// cap. Every entry is a row: without it one user could fill the
	// queue's disk with jobs of MaxTasksPerJob entries each.
	MaxUnfinishedPerUser int
	// MaxTokensPerUser caps the tokens a user holds per role: each is a
	// row, and a user who scripts token creation would otherwise grow the
	// table without end.
	MaxTokensPerUser int
	// TokenTTL is the lifetime of a user or admin token made without one
	// of its own (0: it never expires, as before there was one). The
	// pilot token and the sites' agent and pilot tokens have none: they
	// are replaced by rotation, never in the middle of a pilot's run.
	TokenTTL time.Duration

	LeaseTTL          time.Duration
	ZombieTimeout     time.Duration // no heartbeat for this: ZOMBIE; twice this: EXPIRED
	CancelNotice      time.Duration // how long cancelled jobs are listed to the master
	RecommendationTTL time.Duration // a MiniNode recommendation older than this is ignored
	MaxPull           int           // tasks per pull at most

	SweepInterval     time.Duration // zombie/expiry/purge sweep period
	FlushInterval     time.Duration // usage flush period
	ReconcileInterval time.Duration // usage reconciliation from the task table
	SlowLogInterval   time.Duration // how often slow write transactions are logged
	UsageWindow       time.Duration // the sliding window of CPU time and cost (24 h)

	InsertChunk int // at most this many tasks per transaction of a long write (a submission, a kill, a drop); each is sized to ~1 ms of write lock (store.chunkSizer)
	WriteChunk  int // rows per write transaction elsewhere

	DefaultLimits       fairshare.Limits
	DefaultSlotsPerNode int

	// LookupUser maps a Unix-socket peer's uid to a user name (default:
	// the system's user database).
	LookupUser func(uid uint32) (string, error)
	// LookupAccount finds a user's Unix account, its uid and groups
	// (default: unixacct.Lookup, the system's user database, as the
	// worker's check at a task's start): an output directory a job names
	// must be its owner's, and a dataset readable by its submitter's
	// account, not only by the queue's.
	LookupAccount func(name string) (unixacct.Account, error)

	// Now is the clock; tests replace it.
	Now    func() time.Time
	Logger *slog.Logger
}

// DefaultMaxTokensPerUser is Config.MaxTokensPerUser's default: room for
// a token per machine or script a user runs, not for one per run.
const DefaultMaxTokensPerUser = 20

// DefaultConfig returns the defaults of DESIGN.md.
func DefaultConfig() Config {
	return Config{
		DBPath:               "/var/lib/harvest/queue.db",
		ClaimWait:            15 * time.Second,
		MinBatchSize:         1,
		MaxBatchSize:         10000,
		DefaultMaxAttempts:   3,
		DefaultExpiry:        7 * 24 * time.Hour,
		Retention:            5 * 24 * time.Hour,
		MaxTasksPerJob:       1_000_000,
		MaxTokensPerUser:     DefaultMaxTokensPerUser,
		MaxUnfinishedPerUser: 10_000_000,
		LeaseTTL:             4 * time.Second, // short: a killed master is replaced within it (completions resume within 5 s); fencing makes that safe, the master renews every second
		ZombieTimeout:        5 * time.Minute,
		CancelNotice:         10 * time.Minute,
		RecommendationTTL:    2 * time.Minute,
		MaxPull:              10000,
		SweepInterval:        10 * time.Second,
		FlushInterval:        5 * time.Second,
		ReconcileInterval:    5 * time.Minute,
		StaleSubmission:      time.Hour,
		SlowLogInterval:      time.Second,
		UsageWindow:          24 * time.Hour,
		InsertChunk:          1000,
		WriteChunk:           100,
		DefaultLimits:        fairshare.DefaultLimits(),
		DefaultSlotsPerNode:  1,
		LocalSite:            api.LocalSite,
		Sites:                siteshare.DefaultConfig(),
		LookupUser:           systemLookupUser,
		LookupAccount:        unixacct.Lookup,
		Now:                  time.Now,
	}
}

// sitesConfig is Sites with the figures the queue already has: a master's
// report lives as long as its recommendation, a pilot as long as its
// tasks' heartbeat.
func (c Config) sitesConfig() siteshare.Config {
	s := c.Sites
	s.ReportTTL, s.PilotTTL, s.DefaultSlotsPerNode = c.RecommendationTTL, c.ZombieTimeout, c.DefaultSlotsPerNode
	return s
}

// ErrInvalidConfig is wrapped by every Validate error.
var ErrInvalidConfig = errors.New("invalid queue config")

// Validate checks the configuration.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	if c.DBPath == "" {
		return bad("no database path")
	}
	if len(c.AllowedRoots) == 0 {
		return bad("no allowed roots: datasets could not be submitted")
	}
	for _, r := range c.AllowedRoots {
		if !filepath.IsAbs(r) {
			return bad("allowed root %q is not absolute", r)
		}
	}
	if c.OutputsRoot != "" && !filepath.IsAbs(c.OutputsRoot) {
		return bad("outputs root %q is not absolute", c.OutputsRoot)
	}
	if c.MinBatchSize < 1 || c.MaxBatchSize < c.MinBatchSize {
		return bad("batch size bounds %d..%d", c.MinBatchSize, c.MaxBatchSize)
	}
	if c.DefaultMaxAttempts < 1 {
		return bad("default max attempts %d < 1", c.DefaultMaxAttempts)
	}
	for name, d := range map[string]time.Duration{
		"default expiry": c.DefaultExpiry, "retention": c.Retention, "lease TTL": c.LeaseTTL,
		"zombie timeout": c.ZombieTimeout, "cancel notice": c.CancelNotice,
		"recommendation TTL": c.RecommendationTTL, "sweep interval": c.SweepInterval,
		"flush interval": c.FlushInterval, "reconcile interval": c.ReconcileInterval,
		"slow log interval": c.SlowLogInterval,
		"usage window":      c.UsageWindow, "stale submission age": c.StaleSubmission,
	} {
		if d <= 0 {
			return bad("%s must be positive, got %v", name, d)
		}
	}
	if c.MaxUnfinishedPerUser < 0 {
		return bad("max unfinished tasks per user must not be negative (0: no cap), got %d", c.MaxUnfinishedPerUser)
	}
	if c.TokenTTL < 0 || c.TokenTTL > api.MaxTokenTTL*time.Second {
		return bad("token ttl must be between 0 (never expires) and 10 years, got %v", c.TokenTTL)
	}
	if c.MaxTokensPerUser < 1 {
		return bad("max tokens per user must be at least 1, got %d", c.MaxTokensPerUser)
	}
	if c.MaxTasksPerJob < 1 || c.MaxPull < 1 || c.InsertChunk < 1 || c.WriteChunk < 1 {
		return bad("max tasks per job, max pull and chunk sizes must be positive")
	}
	if c.DefaultSlotsPerNode < 1 {
		return bad("default slots per node must be at least 1")
	}
	if err := c.DefaultLimits.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := validSiteName(c.LocalSite); err != nil {
		return fmt.Errorf("%w: local site: %w", ErrInvalidConfig, err)
	}
	if err := c.sitesConfig().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for _, a := range c.Admins {
		// A name no user can have would make nobody admin, silently.
		if err := validUserName(a); err != nil {
			return fmt.Errorf("%w: admin: %w", ErrInvalidConfig, err)
		}
	}
	if c.Now == nil || c.LookupUser == nil || c.LookupAccount == nil {
		return bad("no clock or no user lookup")
	}
	return nil
}
