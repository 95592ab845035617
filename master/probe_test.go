package master_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// peer listens on 127.0.0.1 and, for its n'th connection (from 1),
// answers any request with 503 "not the master" (as a pilot that is no
// master does) if answer(n), else accepts it and says nothing, ever (a
// host that is cut off, or a stopped process: the test cannot make the
// kernel drop SYNs, so the silence is the pilot's; the probe judges both
// alike).
func peer(t *testing.T, answer func(n int) bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			if answer(n) {
				go func() {
					if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
						c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
					}
					c.Close()
				}()
			}
		}
	}()
	return "http://" + ln.Addr().String()
}

func TestProbeTellsAnsweredRefusedAndSilentApart(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String()
	closed.Close()
	for _, c := range []struct {
		name, url string
		want      master.Verdict
	}{
		{"a pilot that answers, even with an error status", peer(t, func(int) bool { return true }), master.Answered},
		{"a port nothing listens at", refused, master.Refused},
		{"a peer that accepts and never answers", peer(t, func(int) bool { return false }), master.Silent},
		{"no address", "http://", master.Unclear},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := master.Probe(context.Background(), c.url, 200*time.Millisecond); got != c.want {
				t.Fatalf("probe of %s: %s, want %s", c.url, got, c.want)
			}
		})
	}
}

// TestTheProbeRuleNeedsSilencesInARow runs the rule on scripted verdicts
// (no network, no clock but the rule's own waits of a millisecond).
func TestTheProbeRuleNeedsSilencesInARow(t *testing.T) {
	S, A, R, U := master.Silent, master.Answered, master.Refused, master.Unclear
	for _, c := range []struct {
		verdicts []master.Verdict
		gone     bool
		probes   int
	}{
		{[]master.Verdict{S, S}, true, 2},
		{[]master.Verdict{S, A}, false, 2},       // a slow pilot that answers the second time stays
		{[]master.Verdict{S, U, S}, true, 3},     // an unclear probe neither counts nor resets
		{[]master.Verdict{R}, true, 1},           // refused: gone at once
		{[]master.Verdict{A}, false, 1},          // alive: the grace decides
		{[]master.Verdict{U, U, U, U}, false, 4}, // no verdict within the tries: the grace decides
	} {
		n := 0
		probe := func(context.Context, string, time.Duration) master.Verdict {
			v := c.verdicts[n]
			n++
			return v
		}
		r := master.ProbeRule{Timeout: time.Millisecond, Silences: 2, Tries: 4}
		gone, _ := master.Judge(r, context.Background(), "http://x", probe)
		if gone != c.gone || n != c.probes {
			t.Errorf("verdicts %v: gone %v after %d probes, want %v after %d", c.verdicts, gone, n, c.gone, c.probes)
		}
	}
}

// TestANewMasterRequeuesAtOnceTheBatchOfASilentHost: three workers held
// batches when the master died: one on a host that is cut off (its
// connections are accepted by nobody who answers), one on a live pilot,
// and one on a pilot so loaded that it misses the first probe. With a
// minute of reconnect grace, the silent host's batch goes back to the
// queue as interrupted after two silent probes; the two live pilots keep
// theirs. Without the probe of silence the batch waits the minute.
func TestANewMasterRequeuesAtOnceTheBatchOfASilentHost(t *testing.T) {
	dir := t.TempDir()
	addrs := map[string]string{
		"cut":    peer(t, func(int) bool { return false }),
		"alive":  peer(t, func(int) bool { return true }),
		"loaded": peer(t, func(n int) bool { return n > 1 }),
	}
	var workers []workerproto.RegisterRequest
	for _, id := range []string{"cut", "alive", "loaded"} {
		workers = append(workers, workerproto.RegisterRequest{WorkerID: id, PilotID: "p-" + id, Slots: 3, Capacity: 3, Address: addrs[id]})
	}
	held := handOut(t, dir, tasks(1, 9, 3), workers)

	reported := make(chan pilotproto.ResultsRequest, 10)
	cfg := fastMasterConfig(dir, "pB", 2)
	cfg.ReconnectGrace = time.Minute
	cfg.Probe = master.ProbeRule{Timeout: 200 * time.Millisecond, Silences: 2, Tries: 4}
	b, err := master.New(cfg, &FakeQueue{ResultsFunc: func(r pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
		reported <- r
		return pilotproto.ResultsResponse{Applied: len(r.Results)}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	type verdict struct {
		v    master.Verdict
		gone bool
	}
	verdicts := make(chan map[string]verdict, 1)
	var mu sync.Mutex
	got := map[string]verdict{}
	master.OnProbe(b, func(w string, v master.Verdict, gone bool) {
		mu.Lock()
		defer mu.Unlock()
		got[w] = verdict{v, gone}
		if len(got) == 3 {
			verdicts <- got
		}
	})
	bctx, bstop := context.WithCancel(context.Background())
	defer bstop()
	go b.Run(bctx)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var all map[string]verdict
	select {
	case all = <-verdicts:
	case <-ctx.Done():
		t.Fatalf("the probes did not all end: %v", got)
	}
	want := map[string]verdict{"cut": {master.Silent, true}, "alive": {master.Answered, false}, "loaded": {master.Answered, false}}
	for id, w := range want {
		if all[id] != w {
			t.Errorf("%s: verdict %s, gone %v; want %s, gone %v", id, all[id].v, all[id].gone, w.v, w.gone)
		}
	}
	if err := b.WaitFor(ctx, func(s master.Stats) bool { return s.Assigned == 6 && s.Unreported+s.Reported == 3 }); err != nil {
		t.Fatalf("the silent host's batch is still in flight: %v %+v", err, b.Stats())
	}
	select {
	case r := <-reported:
		for _, res := range r.Results {
			k := pilotproto.TaskRef{TaskID: res.TaskID, Attempt: res.Attempt}
			if res.Status != pilotproto.StatusInterrupted || !containsRef(held["cut"], k) {
				t.Errorf("reported %+v, want the cut worker's tasks %v as interrupted", res, held["cut"])
			}
		}
	case <-ctx.Done():
		t.Fatal("nothing reported to the queue")
	}
}

func containsRef(refs []pilotproto.TaskRef, k pilotproto.TaskRef) bool {
	for _, r := range refs {
		if r == k {
			return true
		}
	}
	return false
}
