package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Written to a file or pipe, progress is one line per update, at most one
// per progressLogEvery, and the last one is never lost; drawn on a
// terminal, each line covers the last.
func TestProgressOutWritesLinesWhereNoTerminalIs(t *testing.T) {
	var buf bytes.Buffer
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	at := t0
	p := newProgressOut(&buf, func() time.Time { return at })
	if p.tty {
		t.Fatal("a buffer taken for a terminal")
	}
	p.show("storing tasks: 1/9 ")
	at = t0.Add(time.Second)
	p.show("storing tasks: 2/9 ") // held: 1 s after the last line
	at = t0.Add(progressLogEvery)
	p.show("storing tasks: 5/9 ")
	at = t0.Add(progressLogEvery + time.Second)
	p.show("storing tasks: 9/9 ") // held, then written by done
	p.done()
	p.done() // nothing more
	want := "storing tasks: 1/9\nstoring tasks: 5/9\nstoring tasks: 9/9\n"
	if buf.String() != want || strings.Contains(buf.String(), "\r") {
		t.Fatalf("wrote %q, want %q", buf.String(), want)
	}

	buf.Reset()
	p = newProgressOut(&buf, func() time.Time { return at })
	p.tty = true
	p.show("a longer line")
	p.show("short")
	p.done()
	if got := buf.String(); got != "\ra longer line\rshort        \n" {
		t.Fatalf("terminal: %q", got)
	}
}
