package queue

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/txstats"
)

// Each slow transaction is logged once, with its method and lock time; more
// than the store keeps are counted; a reset starts over.
func TestSlowWriteTransactionsAreLoggedOnceEach(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	at := time.Date(2026, 11, 24, 2, 40, 0, 0, time.UTC)
	slow := func(i int) txstats.Slow {
		return txstats.Slow{At: at.Add(time.Duration(i) * time.Second), In: "store.(*Store).trimJournal",
			Lock: 35*time.Millisecond + time.Duration(i)*time.Millisecond}
	}
	ws := txstats.Stats{Slow: 2, Recent: []txstats.Slow{slow(0), slow(1)}}
	lines := func() []string {
		defer buf.Reset()
		return strings.Split(strings.TrimSpace(buf.String()), "\n")
	}
	if n := logSlow(log, ws, 0); n != 2 {
		t.Fatalf("logged %d, want 2", n)
	}
	got := lines()
	if len(got) != 2 || !strings.Contains(got[0], `msg="slow write transaction" in=trimJournal lock_ms=35 at=2026-11-24T02:40:00Z`) ||
		!strings.Contains(got[1], "lock_ms=36") {
		t.Fatalf("the two slow transactions, oldest first: %q", got)
	}
	if n := logSlow(log, ws, 2); n != 2 || buf.Len() != 0 {
		t.Fatalf("nothing new: logged %d, wrote %q", n, buf.String())
	}
	// 40 more, of which the store kept the last RecentSlow.
	ws.Slow = 42
	ws.Recent = nil
	for i := 10; i < 10+txstats.RecentSlow; i++ {
		ws.Recent = append(ws.Recent, slow(i))
	}
	if n := logSlow(log, ws, 2); n != 42 {
		t.Fatalf("logged %d, want 42", n)
	}
	got = lines()
	if len(got) != 1+txstats.RecentSlow || !strings.Contains(got[0], "not logged one by one") || !strings.Contains(got[0], "count=8") || !strings.Contains(got[1], "lock_ms=45") {
		t.Fatalf("40 new, 32 kept: %d lines, first %q", len(got), got[:2])
	}
	// After a reset of the figures, the new ones are logged.
	if n := logSlow(log, txstats.Stats{Slow: 1, Recent: []txstats.Slow{slow(99)}}, 42); n != 1 || len(lines()) != 1 {
		t.Fatalf("after a reset: logged %d", n)
	}
}
