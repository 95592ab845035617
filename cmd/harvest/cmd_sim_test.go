package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A 4-node thesis workload: a 2-node job runs 0..500 s, a 4-node job
// waits for it, a calibration job (harvest work) arrives at 10 s.
const simThesis = `NodeNum=2 Type=Normal TimeLimit=0:08:20 RealTime=500 SubmitTimeStamp=0
NodeNum=4 Type=Normal TimeLimit=0:05:00 RealTime=300 SubmitTimeStamp=100000
NodeNum=1 Type=Calibration TimeLimit=0:10:00 RealTime=240 SubmitTimeStamp=10000
`

func TestSimCommand(t *testing.T) {
	dir := t.TempDir()
	wl := filepath.Join(dir, "w.txt")
	if err := os.WriteFile(wl, []byte(simThesis), 0o644); err != nil {
		t.Fatal(err)
	}
	noHeader := filepath.Join(dir, "h.swf")
	if err := os.WriteFile(noHeader, []byte("1 0 0 100 2 -1 -1 2 200 -1 1 1 1 -1 -1 -1 -1 -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("an SWF header gives the cluster's size when --nodes is not given", func(t *testing.T) {
		hdr := filepath.Join(dir, "hdr.swf")
		if err := os.WriteFile(hdr, []byte("; MaxNodes: 6 (a note)\n; MaxProcs: 6\n1 0 0 100 2 -1 -1 2 200 -1 1 1 1 -1 -1 -1 -1 -1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errMsg, code := runHarvest(t, "", "sim", "--workload", hdr, "--mode", "baseline")
		if code != 0 || !strings.Contains(out, "6 nodes") {
			t.Errorf("exit %d, stderr %q, stdout %q", code, errMsg, out)
		}
	})
	t.Run("an SWF header of SMP nodes gives the cores, shared; --procs-per-node keeps whole nodes", func(t *testing.T) {
		// Two 3-processor jobs on 2 nodes of 4 cores: shared, both run
		// at once; rounded up to whole nodes, one node each as well; a
		// third of 3 waits for whole nodes but starts at once on cores.
		hdr := filepath.Join(dir, "smp.swf")
		jobs := "1 0 -1 100 3 -1 -1 3 200 -1 1 1 1 -1 -1 -1 -1 -1\n2 0 -1 100 3 -1 -1 3 200 -1 1 1 1 -1 -1 -1 -1 -1\n3 1 -1 100 2 -1 -1 2 200 -1 1 1 1 -1 -1 -1 -1 -1\n"
		if err := os.WriteFile(hdr, []byte("; MaxNodes: 2\n; MaxProcs: 8\n"+jobs), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errMsg, code := runHarvest(t, "", "sim", "--workload", hdr, "--mode", "baseline", "--json")
		var got struct {
			Cores   int `json:"cores_per_node"`
			Foreign struct {
				MaxWait int64 `json:"max_wait_s"`
			} `json:"foreign"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Cores != 4 || got.Foreign.MaxWait != 0 {
			t.Errorf("exit %d, stderr %q, stdout %q: want 4 cores a node and no wait", code, errMsg, out)
		}
		out, errMsg, code = runHarvest(t, "", "sim", "--workload", hdr, "--mode", "baseline", "--json", "--procs-per-node", "4")
		got.Cores = 0
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Cores != 0 || got.Foreign.MaxWait != 99 {
			t.Errorf("exit %d, stderr %q, stdout %q: want whole nodes and the third job waiting 99 s", code, errMsg, out)
		}
	})
	t.Run("baseline --json prints the contract's shape with the measured figures", func(t *testing.T) {
		out, errMsg, code := runHarvest(t, "", "sim", "--workload", wl, "--nodes", "4", "--mode", "baseline", "--to", "1000", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errMsg)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		for _, k := range []string{"nodes", "span_s", "utilization", "useful_utilization", "foreign", "harvest"} {
			if _, ok := got[k]; !ok {
				t.Errorf("missing %q in %s", k, out)
			}
		}
		// 2x500 + 4x300 foreign + 1x240 calibration over 4x1000 node-s.
		if got["utilization"] != 0.61 || got["span_s"] != 1000.0 {
			t.Errorf("utilization %v span %v, want 0.61 and 1000", got["utilization"], got["span_s"])
		}
		f := got["foreign"].(map[string]any)
		if f["jobs"] != 2.0 || f["max_wait_s"] != 400.0 {
			t.Errorf("foreign %v", f)
		}
		h := got["harvest"].(map[string]any)
		jobs := h["jobs"].([]any)
		if len(jobs) != 1 || jobs[0].(map[string]any)["submit_s"] != 10.0 {
			t.Errorf("harvest jobs %v", jobs)
		}
	})
	t.Run("harvest mode writes the jobs CSV and the plot", func(t *testing.T) {
		csv, svg := filepath.Join(dir, "jobs.csv"), filepath.Join(dir, "use.svg")
		out, errMsg, code := runHarvest(t, "", "sim", "--workload", wl, "--nodes", "4", "--mode", "harvest", "--to", "1000", "--task-seconds", "60", "--quiet", "--jobs-csv", csv, "--plot", svg)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errMsg)
		}
		if !strings.Contains(out, "utilisation") || !strings.Contains(out, "harvest job 2") {
			t.Errorf("summary:\n%s", out)
		}
		b, err := os.ReadFile(csv)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if lines[0] != "id,kind,nodes,submit_s,start_s,end_s,blocked_s" || !strings.HasPrefix(lines[1], "0,foreign,2,0,") || !strings.Contains(string(b), ",pilot,1,") {
			t.Errorf("csv:\n%s", b)
		}
		s, err := os.ReadFile(svg)
		if err != nil || !strings.HasPrefix(string(s), "<svg") || !strings.Contains(string(s), "idle pilots") {
			t.Errorf("svg: %v", err)
		}
	})
	t.Run("--decisions writes what the agent did and why, naming jobs by the workload's ids", func(t *testing.T) {
		dec := filepath.Join(dir, "decisions.txt")
		_, errMsg, code := runHarvest(t, "", "sim", "--workload", wl, "--nodes", "4", "--to", "1000", "--task-seconds", "60", "--harvest-backlog", "100", "--quiet", "--decisions", dec)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errMsg)
		}
		// The 4-node job (line 1 of the workload) can start at 500 when
		// the 2-node job reaches its limit, if the two pilots go: they go
		// a minute before (mini time), so that they are gone by then.
		d, err := os.ReadFile(dec)
		if err != nil || !strings.Contains(string(d), "440\trelease-before-end\tjob 1 (4 nodes) can start in 1m0s, when job 0 reaches its limit") {
			t.Errorf("decisions (%v):\n%s", err, d)
		}
	})
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"an unknown mode is refused", "mode", []string{"--workload", wl, "--nodes", "4", "--mode", "bogus"}},
		{"a missing workload file is refused", "no such file", []string{"--workload", filepath.Join(dir, "nope.txt"), "--nodes", "4"}},
		{"a file whose format cannot be told is refused", "--format", []string{"--workload", filepath.Join(dir, "w.dat"), "--nodes", "4"}},
		{"an empty window is refused", "window", []string{"--workload", wl, "--nodes", "4", "--from", "100", "--to", "50"}},
		{"a thesis list without --nodes is refused", "--nodes is required", []string{"--workload", wl}},
		{"an SWF file without a header and without --nodes is refused", "neither MaxNodes nor MaxProcs", []string{"--workload", noHeader}},
		{"cores and whole nodes at once are refused", "not with --procs-per-node", []string{"--workload", noHeader, "--nodes", "4", "--cores-per-node", "4", "--procs-per-node", "4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errMsg, code := runHarvest(t, "", append([]string{"sim"}, tc.args...)...)
			if code != 2 || !strings.Contains(errMsg, tc.want) {
				t.Errorf("exit %d, error %q; want 2 mentioning %q", code, errMsg, tc.want)
			}
		})
	}
}

func TestSimJSONCountsTheLinesItSkipped(t *testing.T) {
	// Three usable jobs, one without a run time, one malformed line, one
	// without a requested time (kept with its run time as limit).
	swf := `; MaxNodes: 4
1 0 0 100 2 -1 -1 2 200 -1 1 1 1 -1 -1 -1 -1 -1
2 10 0 -1 2 -1 -1 2 200 -1 5 1 1 -1 -1 -1 -1 -1
3 20 0 50 1 -1 -1 1 -1 -1 1 2 1 -1 -1 -1 -1 -1
4 30 x
5 40 0 60 4 -1 -1 4 100 -1 1 2 1 -1 -1 -1 -1 -1
`
	wl := filepath.Join(t.TempDir(), "w.swf")
	if err := os.WriteFile(wl, []byte(swf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errMsg, code := runHarvest(t, "", "sim", "--workload", wl, "--nodes", "4", "--mode", "baseline", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errMsg)
	}
	var got struct {
		Skipped, Adjusted map[string]int
		Foreign           struct{ Jobs int }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got.Foreign.Jobs != 3 || got.Skipped["jobs without a run time"] != 1 || got.Skipped["lines without 18 fields"] != 1 ||
		got.Adjusted["jobs without a time limit (run time used)"] != 1 {
		t.Errorf("jobs %d, skipped %v, adjusted %v", got.Foreign.Jobs, got.Skipped, got.Adjusted)
	}
}

func TestParseMultifactor(t *testing.T) {
	m, err := parseMultifactor("age=10, fairshare=5000,half-life=14d,max-age=12h")
	if err != nil || m.WeightAge != 10 || m.WeightSize != 1000 || m.WeightFairshare != 5000 || m.HalfLife != 14*86400 || m.MaxAge != 12*3600 {
		t.Fatalf("%+v, %v", m, err)
	}
	for _, bad := range []string{"age", "age=-1", "speed=3", "half-life=0s", "max-age=soon"} {
		if _, err := parseMultifactor(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
