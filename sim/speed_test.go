package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
)

// The rounds of harvest mode were made cheaper (issue 34: the walks share
// what they read of a snapshot, the snapshot is validated once, busy
// pilots come with it) without changing a decision: on a month of the KTH
// trace in every give-back mode, the agent's decisions and every job's
// start and end hash to what the code before those changes (e3ef29b)
// gave. A change meant to alter decisions (the policy's) changes these:
// rerun with -v, check the change is the intended one and take the new
// hashes the failure prints.
func TestFasterRoundsDecideAsBefore(t *testing.T) {
	kth, ok := sharedWorkload(t, "KTH-SP2-1996-2.1-cln.swf.gz")
	if !ok {
		t.Skip("no KTH trace")
	}
	want := map[GiveBack]string{
		Polling:          "c22260c40062f40fe99a84024d0a4ba98d5b08440a9f0313958fefcda0b79071",
		Preemption:       "e4e14a206cd082dbcb73c12dbc1a5b9c23400d51076e6d67a13c4fb6aaf652dd",
		PreemptionSizing: "7f7be334e3b0541e58967fb18f71bbf1b767c02eca0c1264d7aa7013640b68fe",
	}
	for _, gb := range []GiveBack{Polling, Preemption, PreemptionSizing} {
		t.Run(string(gb), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Mode, cfg.GiveBack, cfg.Nodes = Harvest, gb, 100
			cfg.From, cfg.To = 5783850, 5783850+30*86400
			cfg.HarvestBacklog, cfg.TaskSeconds = 1_000_000_000, 300
			cfg.FastPoll, cfg.EventCheck = 0, 0 // the hashes are of the fixed 10 s poll
			cfg.Agent.Policy.IdleMargin = 0     // and of no idle margin (issue 33's eighth pass)
			var dec bytes.Buffer
			cfg.Decisions = &dec
			res, err := Run(context.Background(), kth, cfg)
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			h.Write(dec.Bytes())
			for _, r := range res.Records {
				fmt.Fprintf(h, "%s %s %d %d %d %d\n", r.ID, r.Name, r.Nodes, r.Submit, r.Start, r.End)
			}
			got := fmt.Sprintf("%x", h.Sum(nil))
			t.Logf("%d decision lines, %d jobs", bytes.Count(dec.Bytes(), []byte("\n")), len(res.Records))
			if got != want[gb] {
				t.Errorf("decisions and jobs hash to %s, before the speed-ups to %s", got, want[gb])
			}
		})
	}
}
