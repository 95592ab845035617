package replay

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// The fixture is `scontrol show config` of the mini-cluster started with
// JOBCOMP=1 PREEMPT=1 (SLURM 22.05.8).
func TestReadClusterSetup(t *testing.T) {
	b, err := os.ReadFile("testdata/scontrol-show-config-jobcomp-preempt-22.05.txt")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	s, err := ReadClusterSetup(conf, "")
	if err != nil || s.JobCompLog != "/var/tmp/hv-sim/run/log/jobcomp.log" || !s.Preemptible {
		t.Fatalf("got %+v, %v; want the jobcomp log and preemptible", s, err)
	}
	if s, err := ReadClusterSetup(conf, "/elsewhere.log"); err != nil || s.JobCompLog != "/elsewhere.log" {
		t.Errorf("--jobcomp-log: got %+v, %v", s, err)
	}
	// SLURM's defaults: no completion log, no preemption.
	plain := strings.NewReplacer("jobcomp/filetxt", "jobcomp/none", "preempt/partition_prio", "preempt/none").Replace(conf)
	_, err = ReadClusterSetup(plain, "")
	if !errors.Is(err, ErrClusterSetup) || !strings.Contains(err.Error(), "JOBCOMP=1") {
		t.Errorf("no completion log: got %v, want ErrClusterSetup naming JOBCOMP=1", err)
	}
	if s, err := ReadClusterSetup(plain, "/given.log"); err != nil || s.Preemptible {
		t.Errorf("preempt/none with a given log: got %+v, %v; want not preemptible, no error", s, err)
	}
	if _, err := ReadClusterSetup("", "/given.log"); !errors.Is(err, ErrClusterSetup) {
		t.Errorf("empty output: got %v, want ErrClusterSetup", err)
	}
}
