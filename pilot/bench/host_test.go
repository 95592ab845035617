package bench

import (
	"testing"
	"time"
)

func TestSummarizeHostCountsTheStretchedComputations(t *testing.T) {
	const work = 500 * time.Microsecond
	var samples []hostSample
	for range 996 {
		samples = append(samples, hostSample{wall: work, use: threadUse{CPU: work}})
	}
	// Four stretched: by the hypervisor (the CPU clock did not count the
	// lost time), by the hypervisor with the time charged to the thread,
	// by a preemption inside the guest, and one just under the threshold.
	samples = append(samples,
		hostSample{wall: 12 * time.Millisecond, use: threadUse{CPU: work}},
		hostSample{wall: 7 * time.Millisecond, use: threadUse{CPU: 6 * time.Millisecond}},
		hostSample{wall: 9 * time.Millisecond, use: threadUse{CPU: work, Preempted: 1}},
		hostSample{wall: 5 * time.Millisecond, use: threadUse{CPU: work}},
	)
	r := summarizeHost(samples, 5*time.Millisecond)
	if r.Computations != 1000 || r.Slow != 3 || r.SlowPreempted != 1 || r.SlowCharged != 1 {
		t.Fatalf("counts: %+v", r)
	}
	if r.LongestMS != 12 || r.LongestCPUMS != 6 || r.P50MS != 0.5 || r.P999MS != 9 {
		t.Errorf("times: longest %v, longest CPU %v, p50 %v, p99.9 %v", r.LongestMS, r.LongestCPUMS, r.P50MS, r.P999MS)
	}
	compute := 996*work + 33*time.Millisecond
	if r.SlowPer10k != 30 || r.ComputeS != compute.Seconds() || r.SlowPerComputeS != 3/compute.Seconds() {
		t.Errorf("rates: %v per 10k, %v s computed, %v per s", r.SlowPer10k, r.ComputeS, r.SlowPerComputeS)
	}
	if e := summarizeHost(nil, time.Millisecond); e.Computations != 0 || e.Slow != 0 || e.SlowPerComputeS != 0 {
		t.Errorf("no samples: %+v", e)
	}
}

func TestProbeHostRunsCalibratedComputations(t *testing.T) {
	cfg := HostConfig{Duration: 300 * time.Millisecond, Work: 200 * time.Microsecond, Pause: time.Millisecond, Threshold: 5 * time.Millisecond}
	r, err := ProbeHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// At most one computation per work+pause; at least a few, whatever the
	// machine does.
	if r.Computations < 5 || r.Computations > int(cfg.Duration/(cfg.Work+cfg.Pause))+1 {
		t.Errorf("%d computations in %s of %s + %s", r.Computations, cfg.Duration, cfg.Work, cfg.Pause)
	}
	// The fastest half ran for about the calibrated length: not a tenth of
	// it (calibration too short) nor ten times (too long).
	if r.P50MS < 0.02 || r.P50MS > 2 {
		t.Errorf("median computation %.3f ms for %s of work", r.P50MS, cfg.Work)
	}
	if r.Priority == "" || r.Slow > int64(r.Computations) || r.LongestMS < r.P50MS {
		t.Errorf("report: %+v", r)
	}
	for _, bad := range []HostConfig{{}, {Duration: time.Second, Work: time.Millisecond, Threshold: time.Millisecond, Pause: -1}} {
		if _, err := ProbeHost(bad); err == nil {
			t.Errorf("ProbeHost(%+v) accepted", bad)
		}
	}
}
