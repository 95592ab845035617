package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// GenerateConfig describes a synthetic workload drawn from a real trace.
type GenerateConfig struct {
	// Nodes and ProcsPerNode are the target machine.
	Nodes, ProcsPerNode int
	// Jobs is how many jobs to draw; Span the seconds they arrive over.
	Jobs int
	Span int64
	// Seed makes the draw reproducible: the same source, configuration
	// and seed give the same workload.
	Seed uint64
}

// Generate draws a workload for a machine larger than the source's, with
// the source's shape: each job's (processors, run time, limit, user) is a
// job of the source drawn at random, the gaps between arrivals are gaps of
// the source drawn at random and stretched so that Jobs jobs arrive in
// Span, and processors are multiplied by one factor chosen so that the
// offered load (processor-seconds asked per second, over the machine's
// processors) is the source's. Users are the source's, one copy per
// source job drawn per source job of the trace (u.k for the k-th copy),
// so the per-user figures keep their spread. A job keeps its source's
// recorded wait, so a warm start (Config.Warm) has jobs running and
// queued at its start. The source's machine size
// comes from its header (Header.Nodes x ProcsPerNode) or its widest job.
func Generate(src Workload, cfg GenerateConfig) (Workload, error) {
	if cfg.Nodes <= 0 || cfg.ProcsPerNode <= 0 || cfg.Jobs <= 0 || cfg.Span <= 0 {
		return Workload{}, fmt.Errorf("%w: generate: nodes, processors per node, jobs and span must be positive: %+v", ErrBadWorkload, cfg)
	}
	if len(src.Jobs) < 2 {
		return Workload{}, fmt.Errorf("%w: generate: the source has %d jobs, need at least 2", ErrBadWorkload, len(src.Jobs))
	}
	srcProcs := src.Header.MaxProcs
	if srcProcs == 0 {
		srcProcs = src.MaxNodes
	}
	if srcProcs == 0 {
		for _, j := range src.Jobs {
			srcProcs = max(srcProcs, j.Nodes)
		}
	}
	first, last := src.Jobs[0].Submit, src.Jobs[len(src.Jobs)-1].Submit
	srcSpan := float64(max(last-first, 1))
	srcRate := float64(len(src.Jobs)) / srcSpan
	rate := float64(cfg.Jobs) / float64(cfg.Span)
	procs := cfg.Nodes * cfg.ProcsPerNode
	// Same offered load: procs x size x rate over the machine is kept.
	scale := float64(procs) / float64(srcProcs) * srcRate / rate
	gaps := make([]int64, len(src.Jobs)-1)
	var gapSum float64
	for i := range gaps {
		gaps[i] = src.Jobs[i+1].Submit - src.Jobs[i].Submit
		gapSum += float64(gaps[i])
	}
	stretch := float64(cfg.Span) / float64(cfg.Jobs) / (gapSum / float64(len(gaps)))
	copies := max(1, int(math.Ceil(rate/srcRate)))
	r := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	out := Workload{Format: "swf", MaxNodes: cfg.Nodes, Header: Header{MaxNodes: cfg.Nodes, MaxProcs: procs}}
	out.Header.Fields = []HeaderField{{Label: "Note", Value: fmt.Sprintf("generated from %d jobs, seed %d, processors x %.3g, gaps x %.3g", len(src.Jobs), cfg.Seed, scale, stretch)}}
	t := 0.0
	for i := range cfg.Jobs {
		s := src.Jobs[r.IntN(len(src.Jobs))]
		t += float64(gaps[r.IntN(len(gaps))]) * stretch
		j := s
		j.ID = strconv.Itoa(i + 1)
		j.User = s.User + "." + strconv.Itoa(r.IntN(copies))
		j.Submit = int64(t)
		j.Nodes = min(procs, max(1, int(math.Round(float64(s.Nodes)*scale))))
		out.Jobs = append(out.Jobs, j)
	}
	return out, nil
}
