package confine

import (
	"net"
	"os"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// Several requests, and several events, travel in one packet and come
// back whole and in order.
func TestRunnerPacketsRoundTrip(t *testing.T) {
	qs := []request{
		{Op: "start", Seq: 1 << 40, Path: "/bin/true", Argv: []string{"true", "", "a b"}, Env: []string{"PATH=/bin", ""}},
		{Op: "run", Seq: 2, Path: "/bin/x", Argv: []string{"x"}, Env: []string{}, Out: "2.1.out", Err: "2.1.err", Tmp: "task-2.1", Read: []string{"/data/shared/x", ""}},
		{Op: "signal", Seq: 3, Sig: 15, Argv: []string{}, Env: []string{}},
		{Op: "queue", Seq: 4, TimeoutMS: 90_000, Path: "/bin/y", Argv: []string{"y"}, Env: []string{}, Out: "4.1.out", Err: "4.1.err", Tmp: "task-4.1"},
		{Op: "slots", Sig: 3, Argv: []string{}, Env: []string{}},
	}
	var b []byte
	for _, q := range qs {
		var err error
		if b, err = appendRequest(b, q); err != nil {
			t.Fatal(err)
		}
	}
	var got []request
	if err := decodeRequests(b, func(q request) { got = append(got, q) }); err != nil || !reflect.DeepEqual(got, qs) {
		t.Errorf("requests %+v came back as %+v, %v", qs, got, err)
	}
	if _, err := appendRequest(nil, request{Op: "run", Argv: []string{"a\x00b"}}); err == nil {
		t.Error("an argument with a NUL byte was encoded")
	}
	evs := []event{{Flags: evReady}, {Seq: 7, Flags: evDone, Status: 0x0f00}, {Seq: -1, Flags: evDone | evFiles, Code: 127, Err: "start x: no such file"},
		{Seq: 8, Flags: evDone | evTmpLeft}, {Seq: 9, Flags: evDone | evTimedOut, Status: 9, Micros: 1_500_000}, {Seq: 10, Flags: evDone | evSkipped}}
	var eb []byte
	for _, e := range evs {
		eb = appendEvent(eb, e)
	}
	var gotEv []event
	if err := decodeEvents(eb, func(e event) { gotEv = append(gotEv, e) }); err != nil || !reflect.DeepEqual(gotEv, evs) {
		t.Errorf("events %+v came back as %+v, %v", evs, gotEv, err)
	}
	for _, bad := range []string{"start\x001", "start\x00x\x000\x00/p\x000\x000\x00\x00\x00\x00", "start\x001\x000\x00/p\x009\x000\x00\x00\x00\x00a\x00"} {
		if err := decodeRequests([]byte(bad), func(request) {}); err == nil {
			t.Errorf("request %q decoded", bad)
		}
	}
	if err := decodeEvents([]byte{}, func(event) {}); err == nil {
		t.Error("an empty event packet decoded")
	}
	if err := decodeEvents(appendEvent(nil, event{Err: "xyz"})[:5], func(event) {}); err == nil {
		t.Error("a truncated event decoded")
	}
}

// The worker tells a job's runner its slots after every wave of ended
// tasks; only a figure that changed reaches the runner (a packet, and a
// wake-up of its loop, fewer per wave).
func TestSetSlotsSendsOnlyAChange(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "worker's end")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer unix.Close(fds[1])
	r := &Runner{conn: c.(*net.UnixConn), pending: map[int64]*Task{}}
	for _, n := range []int{2, 2, 3, 3, 3, 2} {
		r.SetSlots(n)
	}
	var got []int
	buf := make([]byte, maxPacket)
	for {
		n, _, err := unix.Recvfrom(fds[1], buf, unix.MSG_DONTWAIT)
		if err != nil {
			break
		}
		decodeRequests(buf[:n], func(q request) { got = append(got, q.Sig) })
	}
	if !reflect.DeepEqual(got, []int{2, 3, 2}) {
		t.Errorf("the runner was sent slots %v, want [2 3 2]", got)
	}
}

// The runner decodes a request's fields as views of its packet: a
// request allocates its argument and environment lists, not a string per
// field (about twenty per task before).
func TestDecodingRequestsAllocatesNoStrings(t *testing.T) {
	var b []byte
	for i := range 100 {
		var err error
		b, err = appendRequest(b, request{Op: "queue", Seq: int64(i + 1), TimeoutMS: 60_000, Path: "/usr/bin/true", Argv: []string{"true"},
			Env: []string{"PATH=/usr/bin:/bin", "HOME=/home/u", "TMPDIR=/tmp/t", "HARVEST_TASK_ID=12345", "HARVEST_JOB_ID=7", "HARVEST_ATTEMPT=1", "LANG=C", "USER=u"},
			Out: "12345.1.out", Err: "12345.1.err", Tmp: "task-12345.1"})
		if err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	allocs := testing.AllocsPerRun(10, func() {
		n = 0
		decodeRequests(b, func(request) { n++ })
	})
	if n != 100 || allocs > 2*100 {
		t.Errorf("100 requests (%d decoded) took %.0f allocations, want at most 2 each (argv, env)", n, allocs)
	}
}
