package policy

// Buffers holds the arrays a decision works in, for the caller's next
// decision to reuse: the agent decides round after round on snapshots of
// thousands of jobs, and a round's walks allocated a copy of what every
// walk reads (the pending jobs, the holders sorted by their ends, the
// floor marks), the release order, a release set per bisection step and
// the plans' steps anew each round, several hundred kilobytes a round
// (7 GB over a simulated month of a 5,000-node machine, a quarter of its
// CPU in the allocator and the collector).
//
// Only the arrays are kept: every figure is derived again from the new
// input, so a decision with Buffers equals one without
// (TestBuffersDecideAsFreshOnes). A Decided from DecideWith is valid until
// the next DecideWith with the same Buffers. The zero value is ready; a
// Buffers serves one caller at a time.
type Buffers struct {
	base walkBase
	// gone is releaseFor's release set, probe a release set one walk
	// reads (with's result), both by index in the snapshot's jobs.
	gone, probe []bool
	rel         []int
	keys        []releaseKey
	// The arrays and start maps of the ideal walk and of the batch
	// system's walk without releases.
	ideal, batch     plan
	idealAt, batchAt map[int]int64
}

// bools returns b resized to n, all false.
func bools(b []bool, n int) []bool {
	if cap(b) < n {
		return make([]bool, n)
	}
	b = b[:n]
	clear(b)
	return b
}

// int32s returns b resized to n (contents unspecified).
func int32s(b []int32, n int) []int32 {
	if cap(b) < n {
		return make([]int32, n)
	}
	return b[:n]
}

// ints returns b resized to n (contents unspecified).
func ints(b []int, n int) []int {
	if cap(b) < n {
		return make([]int, n)
	}
	return b[:n]
}
