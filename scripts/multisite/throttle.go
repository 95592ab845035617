package main

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// pacer spaces out byte transfers at a rate: each reservation starts when
// the previous one ends (a virtual clock), so transfers sharing a pacer
// share its rate in turn.
type pacer struct {
	mu   sync.Mutex
	rate float64 // bytes per second
	next time.Time
}

// reserve books n bytes and returns how long to wait before sending them.
func (p *pacer) reserve(n int, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next.Before(now) {
		p.next = now
	}
	wait := p.next.Sub(now)
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	return wait
}

// contended is the shared resource of the contention scenario: a file
// server whose disk gives at most total bytes/s, and each connection at
// most perConn bytes/s. Up to total/perConn concurrent readers each get
// full speed; past that every reader slows down in proportion, as tasks
// sharing a file server do.
type contended struct {
	size         int
	total        *pacer
	perConn      float64
	chunk        int
	mu           sync.Mutex
	active, peak int
	served       int
	now          func() time.Time
	sleep        func(time.Duration)
}

func newContended(size int, total, perConn float64) *contended {
	return &contended{size: size, total: &pacer{rate: total}, perConn: perConn, chunk: 16 << 10,
		now: time.Now, sleep: time.Sleep}
}

func (c *contended) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.active++
	c.peak = max(c.peak, c.active)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.active--
		c.served++
		c.mu.Unlock()
	}()
	w.Header().Set("Content-Length", strconv.Itoa(c.size))
	own := &pacer{rate: c.perConn}
	buf := make([]byte, c.chunk)
	for left := c.size; left > 0; {
		n := min(left, c.chunk)
		now := c.now()
		// The slower of the two limits decides when this chunk goes.
		c.sleep(max(own.reserve(n, now), c.total.reserve(n, now)))
		if _, err := w.Write(buf[:n]); err != nil {
			return
		}
		left -= n
	}
}

// stats returns the readers now, the most at once, and the files served.
func (c *contended) stats() (active, peak, served int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.active, c.peak, c.served
}
