package slurm

import (
	"fmt"
	"strings"
	"testing"
)

// genSqueue writes n jobs in the adapter's squeue format, in the shape of
// a busy cluster: a third running, the rest pending with varied limits.
func genSqueue(n int) []byte {
	var b strings.Builder
	users := []string{"alice", "bob", "carol", "dave"}
	limits := []string{"3:00", "1:00:00", "12:00:00", "2-00:00:00", "UNLIMITED"}
	for i := 0; i < n; i++ {
		id := 100000 + i
		u := users[i%len(users)]
		l := limits[i%len(limits)]
		if i%3 == 0 {
			fmt.Fprintf(&b, "%d|%s|RUNNING|None|%d|n[%d-%d]|%s|1795288000|1795289000|%d|batch\n",
				id, u, 1+i%8, i%900, i%900+i%8, l, 4294900000-i)
		} else {
			fmt.Fprintf(&b, "%d|%s|PENDING|Priority|%d||%s|1795289500|1795299000|%d|batch\n",
				id, u, 1+i%16, l, 4294900000-i*7%5000)
		}
	}
	return []byte(b.String())
}

func genSinfo(n int) []byte {
	var b strings.Builder
	states := []string{"allocated", "allocated", "mixed", "idle", "planned", "drained", "down*", "completing"}
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "n%04d|%s|64\n", i, states[i%len(states)])
	}
	return []byte(b.String())
}

func BenchmarkParseSqueue10k(b *testing.B) {
	out := genSqueue(10000)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		jobs, err := ParseSqueue(out, 1795290000, nil)
		if err != nil || len(jobs) != 10000 {
			b.Fatal(err, len(jobs))
		}
	}
}

func BenchmarkParseSinfo1k(b *testing.B) {
	out := genSinfo(1000)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		nodes, _, err := ParseSinfo(out)
		if err != nil || len(nodes) != 1000 {
			b.Fatal(err, len(nodes))
		}
	}
}

func TestGeneratedOutputParses(t *testing.T) {
	jobs, err := ParseSqueue(genSqueue(300), 1795290000, nil)
	if err != nil || len(jobs) != 300 {
		t.Fatal(err, len(jobs))
	}
	if _, c, err := ParseSinfo(genSinfo(80)); err != nil || c.Total != 80 || c.Planned != 10 || c.Drained != 20 {
		t.Fatal(err, c)
	}
}
