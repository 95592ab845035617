package bench_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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
	traceFile := filepath.Join(t.TempDir(), "bench.trace")
	for _, tc := range []struct {
		name  string
		args  []string
		queue string
		procs int // each worker's GOMAXPROCS
	}{
		{"end to end through the real queue by default", []string{"--users", "100", "--trace", traceFile}, "real", max(1, runtime.NumCPU()/2)},
		{"the master and workers alone with --in-memory", []string{"--in-memory", "--worker-gomaxprocs", "3"}, "memory", 3},
		// Real processes, a batched command (true {inputs}, once per batch
		// of 100), against the floor of one true per task.
		{"a batched command with --exec --batched", []string{"--in-memory", "--exec", "--batched", "--users", "1", "--worker-gomaxprocs", "1"}, "memory", 1},
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
			// The machine's share: busy while tasks ran; steal a share.
			if busy, _ := got["machine_busy_pct"].(float64); busy <= 0 || busy > 100 {
				t.Fatalf("machine_busy_pct %v, want in (0, 100]: %s", got["machine_busy_pct"], out)
			}
			if st, ok := got["steal_pct"].(float64); !ok || st < 0 || st > 100 {
				t.Fatalf("steal_pct %v: %s", got["steal_pct"], out)
			}
			if slices.Contains(tc.args, "--exec") {
				f, _ := got["floor"].(map[string]any)
				if f == nil || f["tasks_per_s"].(float64) <= 0 || got["rate_vs_floor"].(float64) <= 0 || got["cpu_vs_floor"].(float64) <= 0 {
					t.Fatalf("an --exec run without its floor and ratios: %s", out)
				}
				split, _ := got["workers_split"].(map[string]any)
				for _, k := range []string{"worker_us_per_task", "runner_us_per_task", "task_us_per_task"} {
					if v, ok := split[k].(float64); !ok || v < 0 {
						t.Fatalf("an --exec run without the workers' split (%s): %s", k, out)
					}
				}
			}
			if tc.queue == "real" {
				if _, ok := b["wal_mb"].(float64); !ok {
					t.Fatalf("no wal_mb in the breakdown: %s", out)
				}
				// The slow transactions are counted per store method.
				sum := 0.0
				if in, ok := b["slow_transactions_in"].(map[string]any); ok {
					for _, v := range in {
						sum += v.(float64)
					}
				}
				if sum != b["slow_transactions"].(float64) {
					t.Fatalf("the slow transactions per method add up to %v of %v: %s", sum, b["slow_transactions"], out)
				}
				// --trace wrote a Go execution trace (its header names the Go
				// version), with the write transactions as regions.
				tr, err := os.ReadFile(traceFile)
				if err != nil || !bytes.HasPrefix(tr, []byte("go 1.")) || !bytes.Contains(tr, []byte("write")) {
					t.Fatalf("--trace %s: %d bytes, %v; want a Go execution trace naming the region \"write\"", traceFile, len(tr), err)
				}
			}
		})
	}

	for _, bad := range [][]string{{"--shape", "nope"}, {"--worker-gomaxprocs", "-1"}, {"--trace", "/nonexistent/dir/t.out"}} {
		out, err := exec.Command(bin, append([]string{"bench", "dispatch"}, bad...)...).CombinedOutput()
		if err == nil {
			t.Fatalf("%v was accepted: %s", bad, out)
		}
		if bad[0] == "--trace" && !bytes.Contains(out, []byte("trace: open /nonexistent/dir/t.out")) {
			t.Fatalf("%v: the error does not name the trace file: %s", bad, out)
		}
	}
}
