package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchHostCommand(t *testing.T) {
	out, msg, code := runHarvest(t, "", "bench", "host", "--duration", "300ms", "--work", "200us", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	var r struct {
		Computations int     `json:"computations"`
		WorkMS       float64 `json:"work_ms"`
		Priority     string  `json:"priority"`
		Slow         int64   `json:"slow"`
		P50MS        float64 `json:"p50_ms"`
		LongestMS    float64 `json:"longest_ms"`
		ThresholdMS  float64 `json:"threshold_ms"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if r.Computations < 5 || r.WorkMS != 0.2 || r.ThresholdMS != 5 || r.Priority == "" || r.Slow > int64(r.Computations) || r.LongestMS < r.P50MS {
		t.Errorf("report %+v", r)
	}
	// The text report says what ran and what to make of it.
	out, msg, code = runHarvest(t, "", "bench", "host", "--duration", "200ms")
	if code != 0 || !strings.Contains(out, "computations of 0.50 ms") || !strings.Contains(out, "x T transactions over 5 ms") {
		t.Errorf("exit %d (%s), report:\n%s", code, msg, out)
	}
	// Bad settings are refused before anything runs.
	for _, args := range [][]string{{"--work", "0s"}, {"--duration", "-1s"}, {"--pause", "-1ms"}, {"--threshold", "0s"}, {"--duration", "2h"}} {
		out, msg, code := runHarvest(t, "", append([]string{"bench", "host"}, args...)...)
		if code != 2 || !strings.Contains(msg, "must be positive") && !strings.Contains(msg, "is over 1h0m0s") || out != "" {
			t.Errorf("%v: exit %d, %q, output %q", args, code, msg, out)
		}
	}
}
