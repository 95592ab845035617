package sim

import (
	"reflect"
	"testing"
)

func TestGenerateIsSeededAndKeepsTheSourcesShapeAndLoad(t *testing.T) {
	src := busyWorkload(3, 2000) // 32 processors
	src.MaxNodes = 32
	load := func(w Workload, procs int) float64 {
		var work float64
		for _, j := range w.Jobs {
			work += float64(j.Nodes) * float64(j.RunTime)
		}
		span := w.Jobs[len(w.Jobs)-1].Submit - w.Jobs[0].Submit
		return work / float64(span) / float64(procs)
	}
	cfg := GenerateConfig{Nodes: 1000, ProcsPerNode: 8, Jobs: 20000, Span: 30 * 86400, Seed: 4}
	a, err := Generate(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(src, cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two workloads")
	}
	cfg.Seed = 5
	if c, _ := Generate(src, cfg); reflect.DeepEqual(a.Jobs, c.Jobs) {
		t.Fatal("another seed gave the same workload")
	}
	if len(a.Jobs) != 20000 || a.Header.MaxNodes != 1000 || a.Header.MaxProcs != 8000 || a.Header.ProcsPerNode() != 8 {
		t.Fatalf("%d jobs, header %+v", len(a.Jobs), a.Header)
	}
	last := a.Jobs[len(a.Jobs)-1].Submit
	if last < 25*86400 || last > 35*86400 {
		t.Errorf("the last job arrives at day %.1f, want about 30", float64(last)/86400)
	}
	ls, lg := load(src, 32), load(a, 8000)
	if lg < 0.8*ls || lg > 1.2*ls {
		t.Errorf("offered load %.3f, the source's %.3f", lg, ls)
	}
	for i, j := range a.Jobs {
		if j.Nodes < 1 || j.Nodes > 8000 || (i > 0 && j.Submit < a.Jobs[i-1].Submit) {
			t.Fatalf("job %d: %+v", i, j)
		}
	}
	if _, err := Generate(src, GenerateConfig{Nodes: 10, ProcsPerNode: 1, Jobs: 0, Span: 10}); err == nil {
		t.Error("zero jobs accepted")
	}
}
