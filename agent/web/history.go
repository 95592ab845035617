package web

import (
	"sync"

	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/cluster"
)

// Sample is the node use one round saw.
type Sample struct {
	// T is the batch system's clock (Unix seconds).
	T       int64
	Total   int
	Foreign int // nodes of running foreign jobs
	Held    int // nodes of running pilots
	Useful  int // running pilots with tasks
}

// SampleOf summarises a round's snapshot.
func SampleOf(s cluster.Snapshot) Sample {
	out := Sample{T: s.Now, Total: s.TotalNodes}
	for _, j := range s.Jobs {
		if j.State != cluster.Running {
			continue
		}
		switch {
		case !j.Pilot:
			out.Foreign += j.Nodes
		default:
			out.Held += j.Nodes
			if j.Busy {
				out.Useful += j.Nodes
			}
		}
	}
	return out
}

// History is a fixed-size ring buffer of round samples: the memory stays
// bounded however long the agent runs (the chart shows the last hours;
// Prometheus keeps the long history).
type History struct {
	mu   sync.Mutex
	buf  []Sample
	next int
	full bool
}

// NewHistory keeps the last n samples (n >= 1).
func NewHistory(n int) *History {
	return &History{buf: make([]Sample, max(n, 1))}
}

// Add records a sample.
func (h *History) Add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf[h.next] = s
	h.next = (h.next + 1) % len(h.buf)
	if h.next == 0 {
		h.full = true
	}
}

// Observe records a round (for the reconciler's OnRound hook).
func (h *History) Observe(res agent.RoundResult) { h.Add(SampleOf(res.Snapshot)) }

// Since returns the samples with T >= from, oldest first.
func (h *History) Since(from int64) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	var all []Sample
	if h.full {
		all = append(all, h.buf[h.next:]...)
	}
	all = append(all, h.buf[:h.next]...)
	out := all[:0:0]
	for _, s := range all {
		if s.T >= from {
			out = append(out, s)
		}
	}
	return out
}
