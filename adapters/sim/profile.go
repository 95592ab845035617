package sim

import "math"

// never is the end of time: the end of an unlimited job.
const never int64 = math.MaxInt64

// profile is the number of free nodes over future time, a step function:
// free[i] nodes are free on [times[i], times[i+1]), the last step lasting
// forever. It is built from running jobs' ends judged by their time limits
// (what a backfill scheduler knows) and then carved by reservations.
type profile struct {
	times []int64
	free  []int
}

// reset starts a profile at now with free nodes and the given (sorted)
// releases: ends[i] is when nodes[i] nodes come back.
func (p *profile) reset(now int64, free int) {
	p.times = append(p.times[:0], now)
	p.free = append(p.free[:0], free)
}

// release adds n nodes from time t on. Calls must come in time order.
func (p *profile) release(t int64, n int) {
	if t == never {
		return
	}
	last := len(p.times) - 1
	if t <= p.times[last] {
		p.free[last] += n
		return
	}
	p.times = append(p.times, t)
	p.free = append(p.free, p.free[last]+n)
}

// earliest returns the first time at which n nodes are free for d seconds
// (d == never: for ever), or never if that never happens.
func (p *profile) earliest(n int, d int64) int64 {
	for i := range p.times {
		if p.free[i] < n {
			continue
		}
		end := add(p.times[i], d)
		ok := true
		for k := i + 1; k < len(p.times) && p.times[k] < end; k++ {
			if p.free[k] < n {
				ok = false
				break
			}
		}
		if ok {
			return p.times[i]
		}
	}
	return never
}

// reserve takes n nodes on [s, s+d).
func (p *profile) reserve(s int64, d int64, n int) {
	end := add(s, d)
	i := p.split(s)
	j := len(p.times)
	if end != never {
		j = p.split(end)
	}
	for k := i; k < j; k++ {
		p.free[k] -= n
	}
}

// split makes t a breakpoint and returns its index. t must not precede
// the profile's start.
func (p *profile) split(t int64) int {
	// Binary search for the last breakpoint <= t.
	lo, hi := 0, len(p.times)
	for lo < hi {
		m := (lo + hi) / 2
		if p.times[m] <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	i := lo - 1
	if p.times[i] == t {
		return i
	}
	p.times = append(p.times, 0)
	p.free = append(p.free, 0)
	copy(p.times[i+2:], p.times[i+1:])
	copy(p.free[i+2:], p.free[i+1:])
	p.times[i+1] = t
	p.free[i+1] = p.free[i]
	return i + 1
}

// add is a+b saturating at never.
func add(a, b int64) int64 {
	if b == never || a > never-b {
		return never
	}
	return a + b
}

// firstShort returns the first time at which fewer than n nodes are
// free, or never.
func (p *profile) firstShort(n int) int64 {
	for i := range p.times {
		if p.free[i] < n {
			return p.times[i]
		}
	}
	return never
}

// fits returns for how long, up to d, n nodes are free from the profile's
// start: 0 if they are not free now, never if for ever (d == never).
func (p *profile) fits(n int, d int64) int64 {
	start := p.times[0]
	for i := range p.times {
		if p.free[i] < n {
			return min(p.times[i]-start, d)
		}
	}
	return d
}
