package main

import "testing"

// The bench reads the queue's write-lock figures from the line the queue
// logs as it closes, among its other lines; without that line it fails
// rather than report zeros.
func TestWriteLockFromLog(t *testing.T) {
	log := `{"time":"2026-11-24T00:00:00Z","level":"INFO","msg":"queue open","transactions":1}
not JSON at all
{"time":"2026-11-24T00:00:01Z","level":"INFO","msg":"write lock at close","transactions":346,"lock_seconds":0.41,"longest_ms":10.91,"longest_in":"store.(*Store).InsertTasks","over_5ms":2}
`
	w, err := writeLockFromLog(log)
	if err != nil || w.Transactions != 346 || w.LongestMS != 10.91 || w.Over5ms != 2 || w.LongestIn != "store.(*Store).InsertTasks" {
		t.Fatalf("read %+v, %v; want 346, 10.91 in InsertTasks, 2 over 5 ms", w, err)
	}
	if _, err := writeLockFromLog(`{"msg":"queue open","transactions":1}`); err == nil {
		t.Fatal("a log without the close line gave figures")
	}
}
