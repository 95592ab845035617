package bench_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

func TestBenchDispatchJSONHasTheContractKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("builds harvest and starts worker processes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain")
	}
	bin := filepath.Join(t.TempDir(), "harvest")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/harvest-hpc/harvest/cmd/harvest").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		queue string
		procs int // each worker's GOMAXPROCS
	}{
		{"end to end through the real queue by default", []string{"--users", "100"}, "real", max(1, runtime.NumCPU()/2)},
		{"the master and workers alone with --in-memory", []string{"--in-memory", "--worker-gomaxprocs", "3"}, "memory", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(bin, append([]string{"bench", "dispatch", "--workers", "2", "--tasks", "3000", "--json"}, tc.args...)...).Output()
			if err != nil {
				t.Fatalf("bench: %v", err)
			}
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, out)
			}
			tps, ok1 := got["tasks_per_s"].(float64)
			ovh, ok2 := got["overhead_ms"].(float64)
			cpu, ok3 := got["process_cpu_us_per_task"].(float64)
			if !ok1 || !ok2 || !ok3 || tps <= 0 || ovh <= 0 || cpu <= 0 {
				t.Fatalf("want positive tasks_per_s, overhead_ms and process_cpu_us_per_task: %s", out)
			}
			if got["tasks"].(float64) != 3000 || got["queue"] != tc.queue {
				t.Fatalf("ran %v tasks through %v, want 3000 through %s", got["tasks"], got["queue"], tc.queue)
			}
			if got["worker_gomaxprocs"] != float64(tc.procs) {
				t.Fatalf("workers ran with GOMAXPROCS %v, want %d", got["worker_gomaxprocs"], tc.procs)
			}
			b, _ := got["breakdown"].(map[string]any)
			if tc.queue == "real" && (b == nil || b["pull_calls"].(float64) < 1 || b["results_calls"].(float64) < 1 || b["write_lock_ms"].(float64) <= 0) {
				t.Fatalf("the end-to-end run says nothing of the queue's share: %s", out)
			}
		})
	}

	for _, bad := range [][]string{{"--shape", "nope"}, {"--worker-gomaxprocs", "-1"}} {
		if out, err := exec.Command(bin, append([]string{"bench", "dispatch"}, bad...)...).CombinedOutput(); err == nil {
			t.Fatalf("%v was accepted: %s", bad, out)
		}
	}
}
