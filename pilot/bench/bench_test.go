package bench_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
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
	out, err := exec.Command(bin, "bench", "dispatch", "--workers", "2", "--tasks", "3000", "--json").Output()
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	tps, ok1 := got["tasks_per_s"].(float64)
	ovh, ok2 := got["overhead_ms"].(float64)
	if !ok1 || !ok2 || tps <= 0 || ovh <= 0 {
		t.Fatalf("want positive tasks_per_s and overhead_ms numbers: %s", out)
	}
	if got["tasks"].(float64) != 3000 {
		t.Fatalf("ran %v tasks, want 3000", got["tasks"])
	}

	out, err = exec.Command(bin, "bench", "dispatch", "--shape", "nope").CombinedOutput()
	if err == nil {
		t.Fatalf("an unknown shape was accepted: %s", out)
	}
}
