// Package simlive runs the simulated cluster of adapters/sim in real time:
// virtual time follows the wall clock (optionally sped up), and a seeded
// synthetic workload of foreign jobs keeps the cluster busy and leaves
// backfill holes, as a real cluster does. It is the "sim" built-in
// adapter, for demos (`harvest agent --adapter sim`) and for the browser
// test of the status page; measurements use `harvest sim`, which drives
// the simulator in virtual time.
package simlive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/sim"
	"github.com/harvest-hpc/harvest/cluster"
)

// OptionList names the options NewFromOptions takes.
const OptionList = "nodes, seed, load, speed, max-job-nodes, mean-run, tag"

// ErrInvalidConfig is wrapped by every Validate error.
var ErrInvalidConfig = errors.New("invalid simlive config")

// Config describes the live simulated cluster.
type Config struct {
	// Nodes is the number of whole nodes.
	Nodes int
	// Seed makes the foreign workload reproducible.
	Seed uint64
	// Load is the offered foreign load as a fraction of the cluster
	// (node-seconds asked per node-second available); above 1 the queue
	// grows, which is what makes holes worth harvesting.
	Load float64
	// Speed is how many virtual seconds pass per wall-clock second.
	Speed float64
	// MaxJobNodes is the widest foreign job (default: half the nodes).
	MaxJobNodes int
	// MeanRun is the mean run time of a foreign job.
	MeanRun time.Duration
	// Tag is the job name by which pilots are recognised.
	Tag string
	// Now is the wall clock; tests replace it.
	Now func() time.Time
}

// DefaultConfig is a 16-node cluster, 90% loaded, in real time.
func DefaultConfig() Config {
	return Config{Nodes: 16, Seed: 1, Load: 0.9, Speed: 1, MeanRun: 10 * time.Minute, Tag: "harvest-pilot", Now: time.Now}
}

// Validate rejects configurations that cannot run.
func (c Config) Validate() error {
	switch {
	case c.Nodes <= 0 || c.Nodes > 100000:
		return fmt.Errorf("%w: nodes must be in 1..100000, got %d", ErrInvalidConfig, c.Nodes)
	case c.Load < 0 || c.Load > 10 || math.IsNaN(c.Load):
		return fmt.Errorf("%w: load must be in 0..10, got %v", ErrInvalidConfig, c.Load)
	case c.Speed <= 0 || c.Speed > 10000 || math.IsNaN(c.Speed):
		return fmt.Errorf("%w: speed must be in (0, 10000], got %v", ErrInvalidConfig, c.Speed)
	case c.MaxJobNodes < 0 || c.MaxJobNodes > c.Nodes:
		return fmt.Errorf("%w: max-job-nodes must be in 0..%d (0 = half the nodes), got %d", ErrInvalidConfig, c.Nodes, c.MaxJobNodes)
	case c.MeanRun < time.Minute:
		return fmt.Errorf("%w: mean-run must be at least 1m, got %v", ErrInvalidConfig, c.MeanRun)
	case c.Tag == "":
		return fmt.Errorf("%w: tag is empty", ErrInvalidConfig)
	case c.Now == nil:
		return fmt.Errorf("%w: no clock", ErrInvalidConfig)
	}
	return nil
}

// Live is the real-time simulated cluster. Safe for concurrent use.
type Live struct {
	cfg   Config
	c     *sim.Cluster
	start time.Time
	base  int64 // Unix seconds of virtual time 0

	mu       sync.Mutex
	rng      *rand.Rand
	next     int64 // virtual time of the next foreign arrival
	rate     float64
	maxNodes int
	seq      int
}

var _ adapters.Adapter = (*Live)(nil)

// New starts a live cluster whose virtual time 0 is now.
func New(cfg Config) (*Live, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sc := sim.DefaultConfig()
	sc.Nodes, sc.Tag = cfg.Nodes, cfg.Tag
	c, err := sim.New(sc)
	if err != nil {
		return nil, err
	}
	maxN := cfg.MaxJobNodes
	if maxN == 0 {
		maxN = max(1, cfg.Nodes/2)
	}
	l := &Live{cfg: cfg, c: c, start: cfg.Now(), rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), maxNodes: maxN}
	l.base = l.start.Unix()
	// Arrival rate so that the offered load is Load: rate x mean nodes x
	// mean run = Load x nodes.
	meanNodes := float64(1+maxN) / 2
	if cfg.Load > 0 {
		l.rate = cfg.Load * float64(cfg.Nodes) / (meanNodes * cfg.MeanRun.Seconds())
		l.next = 0
	} else {
		l.next = math.MaxInt64
	}
	return l, nil
}

// NewFromOptions builds a live cluster from adapter options (strings).
func NewFromOptions(o map[string]string) (*Live, error) {
	if err := adapters.UnknownOptions(o, "nodes", "seed", "load", "speed", "max-job-nodes", "mean-run", "tag"); err != nil {
		return nil, err
	}
	cfg := DefaultConfig()
	var err error
	geti := func(k string, dst *int) {
		if v, ok := o[k]; ok && err == nil {
			*dst, err = strconv.Atoi(v)
			if err != nil {
				err = fmt.Errorf("%w: %s=%q: %w", ErrInvalidConfig, k, v, err)
			}
		}
	}
	getf := func(k string, dst *float64) {
		if v, ok := o[k]; ok && err == nil {
			*dst, err = strconv.ParseFloat(v, 64)
			if err != nil {
				err = fmt.Errorf("%w: %s=%q: %w", ErrInvalidConfig, k, v, err)
			}
		}
	}
	geti("nodes", &cfg.Nodes)
	geti("max-job-nodes", &cfg.MaxJobNodes)
	getf("load", &cfg.Load)
	getf("speed", &cfg.Speed)
	if v, ok := o["seed"]; ok && err == nil {
		cfg.Seed, err = strconv.ParseUint(v, 10, 64)
		if err != nil {
			err = fmt.Errorf("%w: seed=%q: %w", ErrInvalidConfig, v, err)
		}
	}
	if v, ok := o["mean-run"]; ok && err == nil {
		cfg.MeanRun, err = time.ParseDuration(v)
		if err != nil {
			err = fmt.Errorf("%w: mean-run=%q: %w", ErrInvalidConfig, v, err)
		}
	}
	if v, ok := o["tag"]; ok {
		cfg.Tag = v
	}
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// Cluster is the simulator underneath (for tests and reports).
func (l *Live) Cluster() *sim.Cluster { return l.c }

// virtualNow is the virtual time the wall clock has reached.
func (l *Live) virtualNow() int64 {
	return int64(l.cfg.Now().Sub(l.start).Seconds() * l.cfg.Speed)
}

// catchUp queues the foreign arrivals due by the wall clock and moves the
// simulator's clock there.
func (l *Live) catchUp() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.virtualNow()
	if now := l.c.Now(); t < now {
		t = now // the wall clock stepped back: virtual time never does
	}
	for l.next <= t {
		if err := l.arrive(l.next); err != nil {
			return err
		}
		l.next += max(1, int64(l.rng.ExpFloat64()/l.rate))
	}
	return l.c.AdvanceTo(t)
}

// arrive adds one foreign job: width uniform in 1..maxNodes, run time
// exponential around MeanRun (at least a minute), limit 1.2 to 3 times the
// run time rounded up to minutes (users over-ask, which backfill relies on).
func (l *Live) arrive(at int64) error {
	l.seq++
	nodes := 1 + l.rng.IntN(l.maxNodes)
	run := max(60, int64(l.rng.ExpFloat64()*l.cfg.MeanRun.Seconds()))
	limit := int64(float64(run)*(1.2+1.8*l.rng.Float64())+59) / 60 * 60
	_, err := l.c.AddJob(sim.JobSpec{
		Name: "sim-" + strconv.Itoa(l.seq), User: "user", Nodes: nodes,
		TimeLimit: cluster.Limit(limit), RunTime: run, Submit: at,
	})
	return err
}

// Info implements adapters.Adapter.
func (l *Live) Info(ctx context.Context) (adapters.Info, error) {
	info, err := l.c.Info(ctx)
	info.Version = fmt.Sprintf("live x%g, seed %d", l.cfg.Speed, l.cfg.Seed)
	return info, err
}

// Snapshot implements adapters.Adapter. Times are shifted onto the Unix
// clock (virtual time 0 = when the cluster was made) so that deadlines
// read as times of day.
func (l *Live) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return cluster.Snapshot{}, err
	}
	if err := l.catchUp(); err != nil {
		return cluster.Snapshot{}, fmt.Errorf("simlive: %w", err)
	}
	s, err := l.c.Snapshot(ctx)
	if err != nil {
		return s, err
	}
	s.Now += l.base
	for i := range s.Jobs {
		j := &s.Jobs[i]
		j.SubmitTime += l.base // every simulated job has a submit time
		if j.State == cluster.Running {
			j.StartTime += l.base
		}
		if j.ExpectedStart > 0 {
			j.ExpectedStart += l.base
		}
	}
	return s, nil
}

// Submit implements adapters.Adapter: the pilot is queued at the current
// (caught-up) virtual time.
func (l *Live) Submit(ctx context.Context, spec adapters.PilotSpec) (adapters.PilotID, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := l.catchUp(); err != nil {
		return "", fmt.Errorf("simlive: %w", err)
	}
	return l.c.Submit(ctx, spec)
}

// Cancel implements adapters.Adapter.
func (l *Live) Cancel(ctx context.Context, id adapters.PilotID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.catchUp(); err != nil {
		return fmt.Errorf("simlive: %w", err)
	}
	return l.c.Cancel(ctx, id)
}

// Shrink implements adapters.Adapter; end is on the Unix clock of the
// snapshots.
func (l *Live) Shrink(ctx context.Context, id adapters.PilotID, end int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.catchUp(); err != nil {
		return fmt.Errorf("simlive: %w", err)
	}
	return l.c.Shrink(ctx, id, end-l.base)
}
