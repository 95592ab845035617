package main

import (
	"testing"
	"time"
)

func TestPacerSharesItsRateInTurn(t *testing.T) {
	p := &pacer{rate: 1000} // bytes per second
	t0 := time.Unix(0, 0)
	// Three readers book 500 bytes each at the same instant: they go one
	// after the other, half a second apart.
	for i, want := range []time.Duration{0, 500 * time.Millisecond, time.Second} {
		if got := p.reserve(500, t0); got != want {
			t.Fatalf("reservation %d waits %v, want %v", i, got, want)
		}
	}
	// Once the pacer is idle again, a booking starts at once.
	if got := p.reserve(100, t0.Add(10*time.Second)); got != 0 {
		t.Fatalf("an idle pacer made a reader wait %v", got)
	}
}

// The contention model the simulator uses: a reader alone takes size /
// perConn; n readers at once each take size x n / total once n exceeds
// total / perConn. Checked on the pacers' bookings for whole files.
func TestContendedReadersSlowDownPastCapacity(t *testing.T) {
	const size, total, perConn = 1000, 4000.0, 1000.0 // capacity 4 readers
	for _, n := range []int{1, 2, 4, 8} {
		c := newContended(size, total, perConn)
		c.chunk = 100
		t0 := time.Unix(0, 0)
		own := make([]*pacer, n)
		for i := range own {
			own[i] = &pacer{rate: perConn}
		}
		// Interleave the readers' chunks as concurrent readers would, each
		// advancing its own clock by the waits it is given.
		clock := make([]time.Time, n)
		for i := range clock {
			clock[i] = t0
		}
		for sent := 0; sent < size; sent += c.chunk {
			for i := range n {
				w := max(own[i].reserve(c.chunk, clock[i]), c.total.reserve(c.chunk, clock[i]))
				clock[i] = clock[i].Add(w)
			}
		}
		// The last chunk's booking ends one chunk-time after it starts.
		end := clock[n-1].Add(time.Duration(float64(c.chunk) / perConn * float64(time.Second)))
		want := time.Duration(float64(size) / perConn * max(1, float64(n)/(total/perConn)) * float64(time.Second))
		if d := end.Sub(t0); d < want*9/10 || d > want*11/10 {
			t.Errorf("%d readers: the last one ends after %v, want about %v", n, d, want)
		}
	}
}
