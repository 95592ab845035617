package agent_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// Issue 35 item 9 on the real 8-node mini-cluster (one slot a node): carol
// has 400 waiting tasks but may run only max_cores of them at once. The
// agent's pilots never hold more nodes than her quota lets the queue feed;
// when the quota rises they grow to it, and when it falls the idle pilots
// beyond it are released as surplus, no task charged for it.
func TestAgentPilotsNeverExceedWhatAQuotaCappedUserCanRunOnRealSLURM(t *testing.T) {
	c := slurmtest.Require(t, 8)
	began := time.Now() // the cluster's time, not the wait for its lock
	bin := sharedHarvest(t, c)
	s := newGBRun(t, c)
	agent := s.startAgent(bin, nil)
	defer s.stopAgent(agent)
	quota := func(cores int) {
		s.c.Run(t, "", bin, "admin", "user", "set", "carol", "--max-cores", strconv.Itoa(cores), "--create", "--queue", "unix://"+s.socket())
	}
	// held counts carol's pilots queued or running (not those completing
	// after a release).
	held := func() int {
		return len(strings.Fields(s.c.Run(t, "", "squeue", "-h", "-n", "harvest-pilot", "-t", "PENDING,CONFIGURING,RUNNING", "-o", "%i")))
	}
	// atMost fails the test as soon as pilots hold more than n nodes.
	atMost := func(n int, when string) {
		t.Helper()
		if h := held(); h > n {
			t.Fatalf("%s: pilots hold %d nodes, but carol's quota lets the queue feed %d (agent decisions: %s)",
				when, h, n, tailLines(s.decisions(), 5))
		}
	}
	rounds := func() float64 { return s.metric("harvest_rounds_total", "") }

	quota(4)
	s.submitHarvest(bin)
	slurmtest.WaitFor(t, "4 pilots running carol's tasks", 60*time.Second, func() bool {
		atMost(4, "sizing up to the quota of 4")
		return s.metric("harvest_pilots", `state="busy"`) >= 4
	})
	// Five more rounds with 396 tasks still waiting: the agent asks for
	// nothing beyond the quota.
	r0 := rounds()
	slurmtest.WaitFor(t, "5 more agent rounds", 30*time.Second, func() bool {
		atMost(4, fmt.Sprintf("round %.0f after the pilots filled the quota of 4", rounds()-r0))
		return rounds() >= r0+5
	})

	quiet := rounds() - r0

	// The quota rises: the pilots follow it.
	quota(8)
	slurmtest.WaitFor(t, "8 pilots running carol's tasks", 60*time.Second, func() bool {
		return s.metric("harvest_pilots", `state="busy"`) >= 8
	})

	// The quota falls to 2: as tasks end the pilots go idle, the queue
	// hands them nothing, and the agent releases them as surplus.
	released := s.metric("harvest_pilots_released_total", "")
	quota(2)
	slurmtest.WaitFor(t, "pilots back down to carol's quota of 2", 60*time.Second, func() bool { return held() <= 2 })
	if n := s.metric("harvest_pilots_released_total", "") - released; n < 6 {
		t.Errorf("the agent released %.0f pilots, want at least the 6 above the quota (the rest left on their own)", n)
	}
	if f := s.failedTasks(bin); f != 0 {
		t.Errorf("%d of carol's tasks failed: a busy pilot was released as surplus (max_attempts 1)", f)
	}
	t.Logf("quota 4: at most 4 pilots, %.0f rounds after they filled it; quota 8: 8 pilots; quota 2: %.0f surplus pilots released; %v on the cluster",
		quiet, s.metric("harvest_pilots_released_total", "")-released, time.Since(began).Round(time.Second))
}

// decisions is the agent's log lines about its decisions.
func (s *gbRun) decisions() string {
	var out []string
	for _, l := range strings.Split(s.agentLog(), "\n") {
		if strings.Contains(l, "reason=") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
