package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/harvest-hpc/harvest/internal/pgtest"
	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// One queue, two real SLURM clusters: site a's agent hosts the queue,
// site b's agent uses it with an agent token, and one job of carol's runs
// on both. Tasks take three times longer at b: the queue weights b down,
// so a runs more of the job. Every task runs exactly once (counted by the
// tasks themselves), and the queue says where each ran as the tasks do.
func TestOneJobRunsOnTwoRealClustersWeightedBySpeed(t *testing.T) {
	s := twoSites(t, "multisite-test-")
	s.port = freePort(t)
	const n = 60
	work1 := `if [ "$HARVEST_SITE" = b ]; then sleep 3; else sleep 1; fi`
	o, err := scenario(context.Background(), s, n, work1)
	if err != nil {
		s.logAgents(t)
		t.Fatal(err)
	}
	t.Logf("%s", describe(o, n))
	if o.job.State != "DONE" || o.job.Tasks.Done != n {
		t.Fatalf("job %s with %d of %d done", o.job.State, o.job.Tasks.Done, n)
	}
	if o.lost != 0 || o.dup != 0 {
		t.Fatalf("%d tasks lost, %d run twice", o.lost, o.dup)
	}
	if o.done["a"] == 0 || o.done["b"] == 0 {
		t.Fatalf("the job ran at %v: want both sites", o.done)
	}
	if o.done["a"] <= o.done["b"] {
		t.Errorf("site a (1 s tasks) ran %d, site b (3 s tasks) %d: want a more", o.done["a"], o.done["b"])
	}
	for _, js := range o.job.Sites {
		if js.Done != o.done[js.Site] {
			t.Errorf("the queue says %s ran %d, the tasks say %d", js.Site, js.Done, o.done[js.Site])
		}
	}
	var wa, wb float64
	for _, st := range o.sites.Sites {
		switch st.Name {
		case "a":
			wa = st.Weight
		case "b":
			wb = st.Weight
		}
	}
	if !(wb < wa) {
		t.Errorf("weights a %v b %v: want the slow site weighted down", wa, wb)
	}
}

// Two agents serving one database, each on its own cluster (issue 32):
// carol submits through a's agent, both clusters work on the job, a's
// agent is killed with SIGKILL mid-run. No task is lost or run twice, b's
// pilots never stop, a's pilots keep working through b's agent (their URL
// list), and carol submits a second job and watches both through b. The
// database is one SQLite file both agents open (both run on this host), or
// with HARVEST_TEST_DB=postgres a schema of the test PostgreSQL.
func TestTwoAgentsOnOneDatabaseSurviveTheDeathOfOne(t *testing.T) {
	s := twoSites(t, "failover-test-")
	s.shared, s.ports = true, []int{freePort(t), freePort(t)}
	// HARVEST_TEST_DB=postgres: a schema of the test PostgreSQL.
	s.db = pgtest.DB(t, filepath.Join(s.work, "queue.db"))
	const n = 120
	f, err := failover(context.Background(), s, n, "sleep 3")
	if err != nil {
		s.logAgents(t)
		t.Fatal(err)
	}
	t.Logf("%s", describeFailover(f, n))
	for _, o := range []struct {
		name  string
		o     outcome
		tasks int
	}{{"the job submitted through a", f.first, n}, {"the job submitted through b", f.second, n / 4}} {
		if o.o.job.State != "DONE" || o.o.job.Tasks.Done != o.tasks {
			t.Errorf("%s: %s with %d of %d done", o.name, o.o.job.State, o.o.job.Tasks.Done, o.tasks)
		}
		if o.o.lost != 0 || o.o.dup != 0 {
			t.Errorf("%s: %d tasks lost, %d run twice", o.name, o.o.lost, o.o.dup)
		}
	}
	if f.before["a"] == 0 || f.before["b"] == 0 {
		t.Errorf("before a's death the job ran at %v: want both sites", f.before)
	}
	if f.past["a"] == 0 {
		t.Errorf("after a's death a's pilots finished no task (%v): they did not go on through b", f.past)
	}
	if f.past["b"] == 0 || f.bStopped > 0 {
		t.Errorf("after a's death b finished %d tasks and had no pilot in %d samples: b's pilots stopped", f.past["b"], f.bStopped)
	}
}

// twoSites takes both mini-clusters, makes carol, a work directory on the
// first cluster's shared file system (kept if the test fails) and a
// harvest binary in it, and returns the setup of sites a and b.
func twoSites(t *testing.T, prefix string) *setup {
	t.Helper()
	ca, cb := slurmtest.RequireTwo(t, 8)
	root, err := slurmtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(root, "scripts", "minicluster.sh"), "users", "carol").CombinedOutput(); err != nil {
		t.Fatalf("users: %v\n%s", err, out)
	}
	work := filepath.Join(ca.Lab, "shared", prefix+filepath.Base(t.TempDir()))
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(work)
		} else {
			t.Logf("work directory kept: %s", work)
		}
	})
	bin := filepath.Join(work, "harvest")
	build := exec.Command("go", "build", "-o", bin, "./cmd/harvest")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	s := &setup{bin: bin, work: work, labs: []lab{{site: "a", conf: ca.Conf}, {site: "b", conf: cb.Conf}}}
	if s.labs[0].conf == "" {
		s.labs[0].conf = slurmtest.Conf()
	}
	return s
}

// logAgents logs the end of every agent's log.
func (s *setup) logAgents(t *testing.T) {
	for _, l := range s.labs {
		b, _ := os.ReadFile(filepath.Join(s.work, l.site, "agent.log"))
		t.Logf("agent log of %s:\n%s", l.site, tail(b, 4000))
	}
}

// freePort is a TCP port free now (the agent is told to listen on it).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
