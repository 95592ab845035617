package main

import (
	"strings"
	"testing"
)

// --rounds 0 was run as one round while the error for -2 said "at least 1".
func TestBenchDispatchRefusesZeroRounds(t *testing.T) {
	for _, n := range []string{"0", "-2"} {
		_, msg, code := run(t, "bench", "dispatch", "--exec", "--tasks", "10", "--users", "1", "--rounds", n)
		if code != 2 || !strings.Contains(msg, "--rounds "+n+": at least 1") {
			t.Errorf("--rounds %s: exit %d, %q; want 2 and the flag named", n, code, msg)
		}
	}
}
