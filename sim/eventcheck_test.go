package sim

import "testing"

// TestTheEventCheckReleasesPilotsForAJobThatArrives: job A runs from 0 to
// 100 s, then pilots hold all 16 nodes; job B (4 nodes) arrives at 1,003 s. No job waited before, so the
// fast poll is not on: with the 10 s poll alone B starts at the round at
// 1,010 s; with a job-event check every second, the check at 1,003 s sees
// the arrival and the round a second later releases B's pilots. The
// checks cost one call a second between rounds.
func TestTheEventCheckReleasesPilotsForAJobThatArrives(t *testing.T) {
	w := Workload{Format: "swf", Jobs: []Job{
		{ID: "A", Nodes: 4, Submit: 0, TimeLimit: 3600, RunTime: 100},
		{ID: "B", Nodes: 4, Submit: 1003, TimeLimit: 3600, RunTime: 600},
	}}
	startB := func(res Result) int64 {
		for _, r := range res.Records {
			if r.ID == "B" {
				return r.Start
			}
		}
		t.Fatal("B did not start")
		return 0
	}
	mod := func(check int64) func(*Config) {
		return func(c *Config) { c.To, c.EventCheck = 4*3600, check }
	}
	checked := runMode(t, w, Harvest, mod(1))
	polled := runMode(t, w, Harvest, mod(0))
	if s := startB(checked); s != 1004 {
		t.Errorf("event check: B started at %d, want 1004 (the round a second after the check that saw it arrive)", s)
	}
	if s := startB(polled); s != 1010 {
		t.Errorf("10 s poll: B started at %d, want 1010 (the next round)", s)
	}
	if polled.Harvest.EventChecks != 0 {
		t.Errorf("--event-check 0 made %d checks", polled.Harvest.EventChecks)
	}
	// Every second that is not a round is a check: 4 h is 14,400 s.
	if n := checked.Harvest.Polls + checked.Harvest.EventChecks; n < 14_300 || n > 14_400 {
		t.Errorf("%d rounds and %d checks in 14,400 s: want about one of either a second", checked.Harvest.Polls, checked.Harvest.EventChecks)
	}
	t.Logf("rounds %d (checked) and %d (10 s), checks %d (%.0f an hour)", checked.Harvest.Polls, polled.Harvest.Polls, checked.Harvest.EventChecks, checked.Harvest.EventChecksPerHour)
}
