package replay

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseJobCompReadsWhatSlurmctldWrote(t *testing.T) {
	f, err := os.Open("testdata/jobcomp-filetxt-22.05.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cs, err := ParseJobComp(f, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 8 {
		t.Fatalf("%d completions, want 8", len(cs))
	}
	at := func(s string) time.Time { t, _ := time.Parse(jobCompTime, s); return t }
	// Job 3 (16 nodes, bob) waited for jobs 1 and 2; job 4 was cancelled.
	c := cs[2]
	if c.JobID != "3" || c.User != "bob" || c.Name != "big" || c.State != "COMPLETED" || c.Nodes != 16 || c.TimeLimitMin != 1 ||
		!c.Submit.Equal(at("2026-11-23T02:01:27")) || !c.Start.Equal(at("2026-11-23T02:01:30")) || !c.End.Equal(at("2026-11-23T02:01:31")) || !c.Started() {
		t.Fatalf("job 3: %+v", c)
	}
	if cs[3].State != "CANCELLED" || !cs[3].Started() || cs[0].User != "root" || cs[1].Partition != "batch" {
		t.Fatalf("%+v", cs)
	}
	// Job 6 was cancelled while pending: logged with start = end and no
	// nodes. Job 7, a pilot in the preemptible partition, was preempted.
	if p := cs[4]; p.JobID != "6" || p.Started() {
		t.Fatalf("cancelled while pending: %+v", p)
	}
	if p := cs[6]; p.JobID != "7" || p.State != "PREEMPTED" || p.Partition != "harvest" || p.TimeLimitMin != 0 || !p.Started() {
		t.Fatalf("preempted pilot: %+v", p)
	}
}

func TestParseJobCompRefusesWhatItCannotRead(t *testing.T) {
	for _, bad := range []string{
		"UserId=root(0) EndTime=2026-11-23T02:01:28",
		"JobId=7 StartTime=2026-11-23T02:01:27",
		"JobId=7 EndTime=yesterday",
		"JobId=7 NodeCnt=two EndTime=2026-11-23T02:01:28",
	} {
		if _, err := ParseJobComp(strings.NewReader(bad+"\n"), time.UTC); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}

}

func FuzzParseJobComp(f *testing.F) {
	b, _ := os.ReadFile("testdata/jobcomp-filetxt-22.05.log")
	f.Add(string(b))
	f.Fuzz(func(t *testing.T, s string) {
		ParseJobComp(strings.NewReader(s), time.UTC) // must not panic
	})
}
