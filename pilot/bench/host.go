package bench

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/internal/quantile"
	"github.com/harvest-hpc/harvest/queue/txstats"
	"golang.org/x/sys/unix"
)

// The host probe: what the machine alone does to a write transaction.
//
// The queue's write transactions are counted slow past 5 ms (txstats.SlowTx)
// and aim to stay under it. On a virtual machine the hypervisor can take
// the vCPU away in the middle of any of them, for longer than that, and
// no software in the guest can prevent it. The probe measures that floor
// the way the writer meets it: a thread locked to its goroutine runs a
// computation as long
// as a transaction's own work, then sleeps as the writer does between
// transactions. The computation touches no memory, takes no lock and
// makes no system call, so whatever stretches it past its calibrated
// length is the machine: the hypervisor (stolen time) or, if it was
// preempted, something of higher priority inside the guest.
//
// A host that stretches R computations per second of computing past the
// threshold will stretch about R x T of the transactions of a run whose
// write lock was held T seconds (txstats.Stats.Total): the slow
// transactions to expect with no fault of the queue's.

// MaxHostDuration bounds a probe's duration (its samples stay in memory).
const MaxHostDuration = time.Hour

// HostConfig sets the probe.
type HostConfig struct {
	Duration  time.Duration // how long to probe
	Work      time.Duration // each computation's length, calibrated on this CPU
	Pause     time.Duration // the sleep between computations
	Threshold time.Duration // a computation longer than this is slow
	// Progress, if set, is called about once a second with the time
	// probed so far.
	Progress func(done time.Duration)
}

// DefaultHostConfig mirrors a sustained dispatch run (harvest bench
// dispatch --tasks 300000): transactions of ~0.5 ms mean, the write lock
// held about a third of the time; a pause of 1 ms after each 0.5 ms
// computation keeps the probe's thread busy about as much.
func DefaultHostConfig() HostConfig {
	return HostConfig{Duration: 30 * time.Second, Work: 500 * time.Microsecond, Pause: time.Millisecond, Threshold: txstats.SlowTx}
}

// HostReport is what the probe measured.
type HostReport struct {
	Computations int     `json:"computations"`
	WorkMS       float64 `json:"work_ms"`    // the calibrated length
	PauseMS      float64 `json:"pause_ms"`   // the sleep after each
	Priority     string  `json:"priority"`   // the policy the computations ran under
	DurationS    float64 `json:"duration_s"` // the probe's wall time
	ComputeS     float64 `json:"compute_s"`  // wall time inside the computations
	ThresholdMS  float64 `json:"threshold_ms"`
	BusyPct      float64 `json:"machine_busy_pct"`
	StealPct     float64 `json:"steal_pct"`
	// The computations' wall time.
	P50MS     float64 `json:"p50_ms"`
	P99MS     float64 `json:"p99_ms"`
	P999MS    float64 `json:"p999_ms"`
	LongestMS float64 `json:"longest_ms"`
	// Slow: longer than the threshold; per 10,000 computations, and per
	// second of computing (times a write lock's total time in seconds:
	// the slow transactions the host alone accounts for).
	Slow            int64   `json:"slow"`
	SlowPer10k      float64 `json:"slow_per_10k"`
	SlowPerComputeS float64 `json:"slow_per_compute_s"`
	SlowPreempted   int64   `json:"slow_preempted"` // of the slow: preempted inside the guest
	SlowCharged     int64   `json:"slow_charged"`   // of the slow: the thread's CPU clock past the threshold too
	LongestCPUMS    float64 `json:"longest_cpu_ms"` // the longest on the thread's CPU clock
}

// hostSample is one computation: its wall time, and the thread's use.
type hostSample struct {
	wall time.Duration
	use  threadUse
}

// summarizeHost turns the samples into the report's figures.
func summarizeHost(samples []hostSample, threshold time.Duration) HostReport {
	r := HostReport{Computations: len(samples), ThresholdMS: ms(threshold)}
	if len(samples) == 0 {
		return r
	}
	walls := make([]time.Duration, len(samples))
	var compute, longestCPU time.Duration
	for i, s := range samples {
		walls[i] = s.wall
		compute += s.wall
		longestCPU = max(longestCPU, s.use.CPU)
		if s.wall > threshold {
			r.Slow++
			if s.use.Preempted > 0 {
				r.SlowPreempted++
			}
			if s.use.CPU > threshold {
				r.SlowCharged++
			}
		}
	}
	slices.Sort(walls)
	q := func(f float64) float64 { return ms(quantile.Sorted(walls, f)) }
	r.P50MS, r.P99MS, r.P999MS, r.LongestMS = q(0.5), q(0.99), q(0.999), ms(walls[len(walls)-1])
	r.ComputeS = compute.Seconds()
	r.LongestCPUMS = ms(longestCPU)
	r.SlowPer10k = float64(r.Slow) * 1e4 / float64(len(samples))
	if compute > 0 {
		r.SlowPerComputeS = float64(r.Slow) / compute.Seconds()
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// spin computes for n rounds of a xorshift: registers only.
func spin(n int) {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	runtime.KeepAlive(x) // the result is used: the loop stays
}

// calibrate returns the rounds of spin that take work on this CPU: the
// fastest of repeated trials, so that time stolen during calibration does
// not shorten the computations.
func calibrate(work time.Duration) int {
	n := 1 << 12
	for {
		best := time.Duration(1<<63 - 1)
		for range 20 {
			t0 := time.Now()
			spin(n)
			best = min(best, time.Since(t0))
		}
		if best >= 200*time.Microsecond || n >= 1<<30 {
			return max(1, int(float64(n)*float64(work)/float64(best)))
		}
		n *= 4
	}
}

// ProbeHost runs the probe on a thread of its own.
func ProbeHost(cfg HostConfig) (HostReport, error) {
	if cfg.Duration <= 0 || cfg.Work <= 0 || cfg.Pause < 0 || cfg.Threshold <= 0 {
		return HostReport{}, fmt.Errorf("host probe: duration, work and threshold must be positive, pause not negative (got %s, %s, %s, %s)", cfg.Duration, cfg.Work, cfg.Threshold, cfg.Pause)
	}
	// Every computation is kept (40 bytes) for the quantiles: an hour of
	// 0.5 ms ones with 1 ms pauses is ~100 MB.
	if cfg.Duration > MaxHostDuration {
		return HostReport{}, fmt.Errorf("host probe: duration %s is over %s: run it several times instead", cfg.Duration, MaxHostDuration)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rounds := calibrate(cfg.Work)
	priority := "the thread's own policy"
	machine0, ok0 := readCPUTimes()
	start := time.Now()
	lastProgress := start
	samples := make([]hostSample, 0, int(cfg.Duration/(cfg.Work+cfg.Pause))+1)
	for time.Since(start) < cfg.Duration {
		u0, t0 := threadUsage(), time.Now()
		spin(rounds)
		wall := time.Since(t0)
		u := threadUsage().since(u0)
		samples = append(samples, hostSample{wall: wall, use: u})
		if cfg.Progress != nil && time.Since(lastProgress) >= time.Second {
			lastProgress = time.Now()
			cfg.Progress(lastProgress.Sub(start))
		}
		if cfg.Pause > 0 {
			time.Sleep(cfg.Pause)
		}
	}
	elapsed := time.Since(start)
	machine1, ok1 := readCPUTimes()
	r := summarizeHost(samples, cfg.Threshold)
	r.WorkMS, r.PauseMS, r.Priority, r.DurationS = ms(cfg.Work), ms(cfg.Pause), priority, elapsed.Seconds()
	if ok0 && ok1 {
		r.BusyPct, r.StealPct = shares(machine0, machine1)
	}
	return r, nil
}

// threadUse is what the calling thread did over an interval: its CPU
// time, how often it left its core involuntarily (preempted) and
// voluntarily (it slept), and its page faults.
type threadUse struct {
	CPU                      time.Duration
	Preempted, Slept, Faults int64
}

// threadUsage is the calling thread's use so far (its goroutine locked to
// it). The CPU time is the thread's CPU clock: getrusage's is adjusted
// from ticks and can stand still for a millisecond.
func threadUsage() threadUse {
	var u threadUse
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) == nil {
		u.CPU = time.Duration(ts.Nano())
	}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) == nil {
		u.Preempted, u.Slept, u.Faults = ru.Nivcsw, ru.Nvcsw, ru.Minflt+ru.Majflt
	}
	return u
}

func (u threadUse) since(u0 threadUse) threadUse {
	return threadUse{CPU: u.CPU - u0.CPU, Preempted: u.Preempted - u0.Preempted, Slept: u.Slept - u0.Slept, Faults: u.Faults - u0.Faults}
}
