package slurm

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/harvest-hpc/harvest/cluster"
)

// ErrParse is wrapped by every parser error: the command's output was not
// what this adapter expects from SLURM 22.05.
var ErrParse = errors.New("unexpected slurm output")

func parseErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrParse, fmt.Sprintf(format, a...))
}

// The exact formats the adapter asks for. The parsers below are written
// against them; change both together (and recapture testdata/).
const (
	// squeueFormat lists the fields of one job, '|'-separated. It holds no
	// user-controlled text (no job name or comment): a job name may
	// contain '|' or a newline and could forge a line. Pilots are found by
	// a second, name-filtered squeue that prints ids only.
	// Run with SLURM_TIME_FORMAT=%s so %V and %S are Unix seconds.
	squeueFormat = "%i|%u|%T|%r|%D|%N|%l|%V|%S|%Q|%P"
	squeueFields = 11

	// squeueStates are the states that hold or wait for nodes. COMPLETING
	// still holds its nodes (see ParseSqueue); SUSPENDED jobs are left out.
	squeueStates = "PENDING,RUNNING,CONFIGURING,COMPLETING"

	// sinfoFormat: one line per node (sinfo -N): name, long state, CPUs.
	sinfoFormat = "%N|%T|%c"
	sinfoFields = 3

	// jobCheckFormat is used by Cancel on one job id; the name comes last
	// so a '|' in it cannot shift the other fields.
	jobCheckFormat = "%i|%u|%T|%j"
)

// yearMinutes is what SLURM 22.05 stores as the limit of a job started
// without --time in a partition whose MaxTime is INFINITE: 365 days
// (YEAR_MINUTES). squeue prints it as 365-00:00:00 once the job runs,
// while it printed UNLIMITED as long as the job was pending.
const yearMinutes = 365 * 24 * 60

// ParseTimeLimit parses a SLURM time limit as squeue (%l) and scontrol
// print it: "M:SS", "H:MM:SS", "D-HH:MM:SS", "D-HH" or "D-HH:MM", or
// UNLIMITED/INFINITE. A limit of 365 days or more is SLURM's own stand-in
// for infinite and is returned as cluster.Unlimited.
func ParseTimeLimit(s string) (cluster.Limit, error) {
	switch strings.ToUpper(s) {
	case "UNLIMITED", "INFINITE":
		return cluster.Unlimited, nil
	}
	secs, err := parseDuration(s)
	if err != nil {
		return 0, err
	}
	if secs >= yearMinutes*60 {
		return cluster.Unlimited, nil
	}
	return cluster.Seconds(secs), nil
}

// parseJobLimit parses a job's time limit. Besides ParseTimeLimit's
// forms, SLURM prints NOT_SET (squeue's %l) or Partition_Limit (scontrol
// show job) for a job without a limit of its own (time_limit NO_VAL: the
// partition's applies; src/squeue/print.c _print_job_time_limit and
// src/api/job_info.c in 22.05). Those give fromPartition: the caller reads
// the partition's limit, never fails the snapshot for it.
func parseJobLimit(s string) (lim cluster.Limit, fromPartition bool, err error) {
	switch s {
	case "NOT_SET", "Partition_Limit":
		return 0, true, nil
	}
	lim, err = ParseTimeLimit(s)
	return lim, false, err
}

// partitionLimit is the limit of a job that has none of its own in
// partition list names ("batch" or "batch,short" for a job pending in
// several): slurmctld gives such a job its partition's MaxTime when it
// reports it (job_mgr.c pack_job, 22.05), so the longest MaxTime of the
// named partitions; unknown (Unlimited) when none of them is known.
func partitionLimit(parts []Partition, names string) cluster.Limit {
	var lim cluster.Limit
	for name := range strings.SplitSeq(names, ",") {
		for _, p := range parts {
			if p.Name != name || p.MaxTime == 0 {
				continue
			}
			if p.MaxTime.IsUnlimited() {
				return cluster.Unlimited
			}
			lim = max(lim, p.MaxTime)
		}
	}
	if lim == 0 {
		return cluster.Unlimited
	}
	return lim
}

// parseDuration parses [D-]H:M:S, M:S, D-H and D-H:M into seconds.
func parseDuration(s string) (int64, error) {
	if s == "" || len(s) > 32 {
		return 0, parseErr("time %q is not a SLURM duration", s)
	}
	var days int64
	rest := s
	hasDays := false
	if d, r, ok := strings.Cut(s, "-"); ok {
		n, err := atoiNonNeg(d)
		if err != nil {
			return 0, parseErr("time %q: bad day count", s)
		}
		days, rest, hasDays = n, r, true
	}
	var (
		buf  [3]int64
		nums = buf[:0]
	)
	for p := range strings.SplitSeq(rest, ":") {
		n, err := atoiNonNeg(p)
		if err != nil || len(nums) == len(buf) {
			return 0, parseErr("time %q is not a SLURM duration", s)
		}
		nums = append(nums, n)
	}
	var h, m, sec int64
	switch {
	case hasDays && len(nums) == 1: // D-H
		h = nums[0]
	case hasDays && len(nums) == 2: // D-H:M
		h, m = nums[0], nums[1]
	case len(nums) == 3: // [D-]H:M:S
		h, m, sec = nums[0], nums[1], nums[2]
	case !hasDays && len(nums) == 2: // M:S
		m, sec = nums[0], nums[1]
	default:
		return 0, parseErr("time %q is not a SLURM duration", s)
	}
	if days > 1<<20 || h > 1<<20 || m > 1<<30 || sec > 1<<30 {
		return 0, parseErr("time %q is out of range", s)
	}
	return ((days*24+h)*60+m)*60 + sec, nil
}

func atoiNonNeg(s string) (int64, error) {
	if s == "" || len(s) > 12 {
		return 0, strconv.ErrSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// parseEpoch parses a %s time from squeue. "N/A", "Unknown", "None" and 0
// mean no time.
func parseEpoch(s string) (int64, error) {
	switch s {
	case "N/A", "Unknown", "None", "NONE", "0", "":
		return 0, nil
	}
	n, err := atoiNonNeg(s)
	if err != nil {
		return 0, parseErr("time %q is not Unix seconds (is SLURM_TIME_FORMAT=%%s set?)", s)
	}
	return n, nil
}

// lines splits a command's whole output into its non-blank lines,
// without trailing '\r'. Output that does not end with a newline was cut
// off (a command killed mid-line, a truncated pipe) and is an error:
// "4" cut from "42\n" must not read as job 4.
func lines(out []byte, what string) ([]string, error) {
	if len(out) > 0 && out[len(out)-1] != '\n' {
		ls := splitLines(out)
		last := ""
		if len(ls) > 0 {
			last = ls[len(ls)-1]
		}
		return nil, parseErr("%s output was cut off: its last line %q has no newline", what, trunc(last))
	}
	return splitLines(out), nil
}

// splitLines splits text into its non-blank lines, without trailing '\r',
// whether or not it ends with a newline (error messages).
func splitLines(out []byte) []string {
	var ls []string
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimRight(l, "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		ls = append(ls, l)
	}
	return ls
}

// maxLine bounds one line of output: a job's node list is its longest
// field (a hostlist expression, "n[1-3,7]").
const maxLine = 1 << 20

// lineReader reads a command's output one line at a time, as the command
// prints it, so that a large answer is parsed without being held whole
// (the parsed jobs are what stays). Like lines, it refuses an output whose
// last line has no newline.
type lineReader struct {
	br   *bufio.Reader
	what string
	n    int // lines read
}

func newLineReader(r io.Reader, what string) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), what: what}
}

// next returns the next non-blank line (without "\n" or "\r"), io.EOF at
// the end of a complete output, or an error wrapping ErrParse. The line
// is only valid until the next call.
func (lr *lineReader) next() ([]byte, error) {
	for {
		l, err := lr.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Longer than the buffer: gather the rest of the line.
			long := append([]byte(nil), l...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxLine {
				l, err = lr.br.ReadSlice('\n')
				long = append(long, l...)
			}
			if len(long) > maxLine {
				return nil, parseErr("%s line %d is longer than %d bytes", lr.what, lr.n+1, maxLine)
			}
			l = long
		}
		switch {
		case err == io.EOF && len(l) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return nil, parseErr("%s output was cut off: line %d %q has no newline", lr.what, lr.n+1, trunc(string(l)))
		case err != nil:
			return nil, fmt.Errorf("%w: reading %s: %w", ErrParse, lr.what, err)
		}
		lr.n++
		l = bytes.TrimRight(l[:len(l)-1], "\r")
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		return l, nil
	}
}

// splitFields splits a '|'-separated line into exactly len(f) fields,
// without allocating; it returns the number of fields found and whether
// that is len(f).
func splitFields(l string, f []string) (int, bool) {
	n := 0
	for {
		i := strings.IndexByte(l, '|')
		if n == len(f)-1 && i >= 0 {
			return n + 1 + strings.Count(l, "|"), false
		}
		if i < 0 {
			f[n] = l
			n++
			return n, n == len(f)
		}
		f[n] = l[:i]
		n++
		l = l[i+1:]
	}
}

// validID accepts SLURM job ids: "123", array tasks "123_4" and
// "123_[5-9]", het job components "123+0".
func validID(s string) bool {
	if s == "" || len(s) > 64 || s[0] < '0' || s[0] > '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9') && !strings.ContainsRune("_+[]-,%", rune(c)) {
			return false
		}
	}
	return true
}

// ParseSqueue parses the output of
//
//	SLURM_TIME_FORMAT=%s squeue -a -h -r -t PENDING,RUNNING,CONFIGURING,COMPLETING -o '%i|%u|%T|%r|%D|%N|%l|%V|%S|%Q|%P'
//
// into jobs: running ones first (by start time, then id), then pending
// ones in the order the scheduler considers them (priority descending,
// then submit time, then id). now is the local clock in Unix seconds; run
// times are now - start. parts are the cluster's partitions, for the jobs
// whose limit is the partition's (see parseJobLimit); nil = unknown.
//
// A COMPLETING job still holds its nodes for a few seconds while its
// processes are killed and the epilog runs. It is reported as running with
// no time left (TimeLimit = RunTime = its elapsed time, at least 1 s,
// Reason "Completing"): the node is not idle yet, but it will be free
// within the policy's miniTime, which is exactly what the policy should
// conclude. CONFIGURING jobs (nodes booting) hold their nodes and are
// reported as running.
//
// Empty output is a valid, empty queue. Any line that does not match the
// format, and an output whose last line has no newline, is an error: a
// partial job list must never look real.
func ParseSqueue(out []byte, now int64, parts []Partition) ([]cluster.Job, error) {
	return ReadSqueue(bytes.NewReader(out), now, parts)
}

// ReadSqueue is ParseSqueue reading the output as squeue prints it.
func ReadSqueue(r io.Reader, now int64, parts []Partition) ([]cluster.Job, error) {
	// The jobs are gathered in fixed-size chunks and sorted by index: a
	// growing slice would copy 200-byte jobs over and over, and sorting
	// the jobs themselves would move them a dozen times more (100,000
	// jobs: 130 MB allocated and 470 ms before).
	const chunk = 4096
	var (
		chunks [][]cluster.Job
		f      [squeueFields]string
		lr     = newLineReader(r, "squeue")
	)
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		// One string per line: the job's strings are slices of it.
		l := string(b)
		if n, ok := splitFields(l, f[:]); !ok {
			return nil, parseErr("squeue line %d has %d fields, want %d: %q", lr.n, n, squeueFields, trunc(l))
		}
		j, err := parseSqueueJob(&f, now, parts)
		if err != nil {
			return nil, fmt.Errorf("squeue line %d: %w", lr.n, err)
		}
		if len(chunks) == 0 || len(chunks[len(chunks)-1]) == chunk {
			chunks = append(chunks, make([]cluster.Job, 0, chunk))
		}
		chunks[len(chunks)-1] = append(chunks[len(chunks)-1], j)
	}
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	job := func(i int32) *cluster.Job { return &chunks[i/chunk][i%chunk] }
	keys := make([]jobKey, 0, n)
	for i := range int32(n) {
		keys = append(keys, keyOf(job(i), i))
	}
	slices.SortFunc(keys, func(a, b jobKey) int {
		if c := a.compare(b); c != 0 {
			return c
		}
		return strings.Compare(job(a.idx).ID, job(b.idx).ID)
	})
	jobs := make([]cluster.Job, n)
	for i, k := range keys {
		jobs[i] = *job(k.idx)
	}
	return jobs, nil
}

// jobKey is what the job list is sorted on, side by side in memory:
// running jobs first, by start time then id; then pending jobs in SLURM's
// scheduling order within a partition: priority (highest first), submit
// time, id. Ids compare on their leading digits, then ("12_1", "12_2")
// whole.
type jobKey struct {
	pending bool
	prio    float64 // pending: priority, highest first
	t       int64   // running: start time; pending: submit time
	id      int64   // the id's leading digits
	idx     int32
}

func keyOf(j *cluster.Job, idx int32) jobKey {
	k := jobKey{pending: j.State == cluster.Pending, t: j.StartTime, id: leadingInt(j.ID), idx: idx}
	if k.pending {
		k.prio, k.t = j.Priority, j.SubmitTime
	}
	return k
}

func (a jobKey) compare(b jobKey) int {
	switch {
	case a.pending != b.pending:
		if a.pending {
			return 1
		}
		return -1
	case a.prio != b.prio:
		return cmp.Compare(b.prio, a.prio)
	case a.t != b.t:
		return cmp.Compare(a.t, b.t)
	}
	return cmp.Compare(a.id, b.id)
}

func leadingInt(s string) int64 {
	var n int64
	for i := 0; i < len(s) && i < 18 && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int64(s[i]-'0')
	}
	return n
}

func parseSqueueJob(f *[squeueFields]string, now int64, parts []Partition) (cluster.Job, error) {
	id, user, state, reason, nodes, nodeList, limit, submit, start, prio, part :=
		f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10]
	if !validID(id) {
		return cluster.Job{}, parseErr("bad job id %q", trunc(id))
	}
	j := cluster.Job{ID: id, User: user, NodeList: nodeList, Partition: part}
	if user == "" {
		return j, parseErr("job %s has no user", id)
	}
	// A pending job asked for a range (-N 2-8) prints its minimum.
	nmin, _, _ := strings.Cut(nodes, "-")
	n, err := atoiNonNeg(nmin)
	if err != nil || n <= 0 || n > 1<<24 {
		return j, parseErr("job %s: bad node count %q", id, trunc(nodes))
	}
	j.Nodes = int(n)
	lim, fromPartition, err := parseJobLimit(limit)
	if err != nil {
		return j, fmt.Errorf("job %s: %w", id, err)
	}
	j.TimeLimit = lim
	if fromPartition {
		j.TimeLimit = partitionLimit(parts, part)
	}
	if j.TimeLimit == 0 {
		// sbatch -t 0 means "no limit" to SLURM.
		j.TimeLimit = cluster.Unlimited
	}
	if j.SubmitTime, err = parseEpoch(submit); err != nil {
		return j, fmt.Errorf("job %s: submit: %w", id, err)
	}
	startT, err := parseEpoch(start)
	if err != nil {
		return j, fmt.Errorf("job %s: start: %w", id, err)
	}
	if prio != "" && prio != "N/A" {
		p, err := strconv.ParseFloat(prio, 64)
		if err != nil || p < 0 || p != p || math.IsInf(p, 0) { // "inf" parses; JSON cannot carry it
			return j, parseErr("job %s: bad priority %q", id, trunc(prio))
		}
		j.Priority = p
	}
	switch state {
	case "PENDING":
		j.State = cluster.Pending
		j.Reason = reason
		if startT >= now {
			j.ExpectedStart = startT
		}
	case "RUNNING", "CONFIGURING", "COMPLETING":
		j.State = cluster.Running
		j.StartTime = startT
		if startT > 0 && now > startT {
			j.RunTime = now - startT
		}
		if state == "COMPLETING" {
			j.Reason = "Completing"
			j.RunTime = max(j.RunTime, 1)
			j.TimeLimit = cluster.Seconds(j.RunTime)
		}
	default:
		return j, parseErr("job %s: unexpected state %q (asked for %s)", id, trunc(state), squeueStates)
	}
	return j, nil
}

// ParseJobIDs parses the output of `squeue -h -o %i` (one id a line), used
// to find the pilots (squeue -u USER -n TAG). Empty output is no ids.
func ParseJobIDs(out []byte) ([]string, error) {
	ls, err := lines(out, "squeue")
	if err != nil {
		return nil, err
	}
	var ids []string
	for i, l := range ls {
		l = strings.TrimSpace(l)
		if !validID(l) {
			return nil, parseErr("line %d is not a job id: %q", i+1, trunc(l))
		}
		ids = append(ids, l)
	}
	return ids, nil
}

// NodeCounts sums a node list into the snapshot's counts.
type NodeCounts struct {
	Total, Idle, Planned, Allocated, Drained int
}

// ParseSinfo parses `sinfo -h -N -p P -o '%N|%T|%c'` (one line per node
// and partition). A node listed twice (in two partitions) counts once.
// Each node's state (%T) maps to what it means for harvesting (nodeState;
// the table is in docs/slurm.md): only a node SLURM would start a pilot on
// at once counts as idle; an unknown state is never idle, and never fails
// the rest of the answer.
//
// No nodes at all is an error: a partition without nodes is a
// misconfiguration or a broken answer, never a real empty cluster.
func ParseSinfo(out []byte) ([]cluster.Node, NodeCounts, error) {
	return ReadSinfo(bytes.NewReader(out))
}

// ReadSinfo is ParseSinfo reading the output as sinfo prints it.
func ReadSinfo(r io.Reader) ([]cluster.Node, NodeCounts, error) {
	var (
		nodes []cluster.Node
		c     NodeCounts
		seen  = map[string]bool{}
		f     [sinfoFields]string
		lr    = newLineReader(r, "sinfo")
	)
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, NodeCounts{}, err
		}
		l := string(b)
		if n, ok := splitFields(l, f[:]); !ok {
			return nil, NodeCounts{}, parseErr("sinfo line %d has %d fields, want %d: %q", lr.n, n, sinfoFields, trunc(l))
		}
		name, st, cpus := f[0], f[1], f[2]
		if name == "" || strings.ContainsAny(name, " \t") {
			return nil, NodeCounts{}, parseErr("sinfo line %d: bad node name %q", lr.n, trunc(name))
		}
		ncpu, err := atoiNonNeg(cpus)
		if err != nil || ncpu > 1<<24 {
			return nil, NodeCounts{}, parseErr("sinfo line %d: bad CPU count %q", lr.n, trunc(cpus))
		}
		state, err := nodeState(st)
		if err != nil {
			return nil, NodeCounts{}, fmt.Errorf("sinfo line %d: %w", lr.n, err)
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		nodes = append(nodes, cluster.Node{Name: name, State: state, CPUs: int(ncpu)})
		c.Total++
		switch state {
		case cluster.NodeIdle:
			c.Idle++
		case cluster.NodePlanned:
			c.Idle++
			c.Planned++
		case cluster.NodeAllocated:
			c.Allocated++
		case cluster.NodeDrained:
			c.Drained++
		}
	}
	if len(nodes) == 0 {
		return nil, c, parseErr("sinfo lists no nodes")
	}
	return nodes, c, nil
}

// Partition is what the adapter needs from `scontrol -o show partition`.
type Partition struct {
	Name        string
	Default     bool
	MaxTime     cluster.Limit
	DefaultTime cluster.Limit // 0 = NONE
	State       string
	TotalNodes  int
	// The preemption settings (see DetectPreemption): Nodes is the node
	// list as configured ("n[1-8]"), PreemptMode the partition's
	// ("OFF", "CANCEL", "REQUEUE", "SUSPEND,GANG"...), GraceTime seconds.
	Nodes        string
	PriorityTier int
	PreemptMode  string
	GraceTime    int64
	Hidden       bool
}

// ParsePartitions parses `scontrol -o show partition` (one partition a
// line of Key=Value pairs). No partition at all is an error.
func ParsePartitions(out []byte) ([]Partition, error) {
	ls, err := lines(out, "scontrol show partition")
	if err != nil {
		return nil, err
	}
	var ps []Partition
	for i, l := range ls {
		kv := map[string]string{}
		for _, w := range strings.Fields(l) {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				continue // values never hold spaces in -o mode; tolerate stray words
			}
			kv[k] = v
		}
		p := Partition{Name: kv["PartitionName"], Default: kv["Default"] == "YES", State: kv["State"]}
		if p.Name == "" {
			return nil, parseErr("scontrol line %d has no PartitionName: %q", i+1, trunc(l))
		}
		mt, ok := kv["MaxTime"]
		if !ok {
			return nil, parseErr("partition %s has no MaxTime", p.Name)
		}
		if p.MaxTime, err = ParseTimeLimit(mt); err != nil {
			return nil, fmt.Errorf("partition %s MaxTime: %w", p.Name, err)
		}
		if p.MaxTime == 0 {
			return nil, parseErr("partition %s has MaxTime 0", p.Name)
		}
		if dt := kv["DefaultTime"]; dt != "" && dt != "NONE" {
			if p.DefaultTime, err = ParseTimeLimit(dt); err != nil {
				return nil, fmt.Errorf("partition %s DefaultTime: %w", p.Name, err)
			}
		}
		p.Nodes, p.PreemptMode, p.Hidden = kv["Nodes"], kv["PreemptMode"], kv["Hidden"] == "YES"
		for _, f := range []struct {
			key string
			to  *int64
		}{{"GraceTime", &p.GraceTime}} {
			if v := kv[f.key]; v != "" {
				n, err := atoiNonNeg(v)
				if err != nil {
					return nil, parseErr("partition %s: bad %s %q", p.Name, f.key, trunc(v))
				}
				*f.to = n
			}
		}
		if v := kv["PriorityTier"]; v != "" {
			n, err := atoiNonNeg(v)
			if err != nil || n > 1<<16 {
				return nil, parseErr("partition %s: bad PriorityTier %q", p.Name, trunc(v))
			}
			p.PriorityTier = int(n)
		}
		if tn := kv["TotalNodes"]; tn != "" {
			n, err := atoiNonNeg(tn)
			if err != nil || n > 1<<24 {
				return nil, parseErr("partition %s: bad TotalNodes %q", p.Name, trunc(tn))
			}
			p.TotalNodes = int(n)
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, parseErr("scontrol lists no partitions")
	}
	return ps, nil
}

// ParseSbatch parses the output of `sbatch --parsable`: "ID" or
// "ID;cluster".
func ParseSbatch(out []byte) (string, error) {
	ls, err := lines(out, "sbatch")
	if err != nil {
		return "", err
	}
	if len(ls) != 1 {
		return "", parseErr("sbatch --parsable printed %d lines, want 1: %q", len(ls), trunc(string(out)))
	}
	id, _, _ := strings.Cut(strings.TrimSpace(ls[0]), ";")
	if !validID(id) || strings.ContainsAny(id, "_+[],%-") {
		return "", parseErr("sbatch --parsable printed %q, not a job id", trunc(ls[0]))
	}
	return id, nil
}

// ParseVersion parses `sinfo --version` ("slurm 22.05.8" or
// "slurm-wlm 22.05.8") into the version number.
func ParseVersion(out []byte) (string, error) {
	if _, err := lines(out, "sinfo --version"); err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || !strings.HasPrefix(f[0], "slurm") || f[1] == "" || f[1][0] < '0' || f[1][0] > '9' {
		return "", parseErr("sinfo --version printed %q", trunc(string(out)))
	}
	return f[1], nil
}

// sdiagCounters are the lines of sdiag's job counters JobEvents sums:
// every submission, end and cancel (not "Jobs started": a job starting
// frees no node a waiting job could use).
var sdiagCounters = []string{"Jobs submitted:", "Jobs completed:", "Jobs canceled:", "Jobs failed:"}

// ParseSdiag parses `sdiag` (SLURM 22.05's layout: "Jobs submitted: 12",
// one counter a line) into the sum of its submitted, completed, canceled
// and failed counters. Every one of them must be there, once.
func ParseSdiag(out []byte) (int64, error) {
	ls, err := lines(out, "sdiag")
	if err != nil {
		return 0, err
	}
	var sum int64
	found := make([]bool, len(sdiagCounters))
	for _, line := range ls {
		line = strings.TrimSpace(line)
		for i, name := range sdiagCounters {
			v, ok := strings.CutPrefix(line, name)
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 || found[i] {
				return 0, parseErr("sdiag printed %q", trunc(line))
			}
			found[i] = true
			sum += n
		}
	}
	for i, ok := range found {
		if !ok {
			return 0, parseErr("sdiag printed no %q line: %q", sdiagCounters[i], trunc(string(out)))
		}
	}
	return sum, nil
}

// Holder is a job that holds nodes, as CrossCheck sees it.
type Holder struct {
	ID, Partition, State string
	Nodes                int
	Start                int64
}

// ParseHolders parses `squeue -h -r -t RUNNING,CONFIGURING,COMPLETING,SUSPENDED
// -w NODES -o '%i|%P|%D|%S|%T'` (with SLURM_TIME_FORMAT=%s).
func ParseHolders(out []byte) ([]Holder, error) {
	ls, err := lines(out, "squeue")
	if err != nil {
		return nil, err
	}
	var hs []Holder
	var f [5]string
	for i, l := range ls {
		if n, ok := splitFields(l, f[:]); !ok {
			return nil, parseErr("squeue line %d has %d fields, want 5: %q", i+1, n, trunc(l))
		}
		n, err := atoiNonNeg(f[2])
		if !validID(f[0]) || f[1] == "" || f[4] == "" || err != nil || n <= 0 || n > 1<<24 {
			return nil, parseErr("squeue line %d: %q", i+1, trunc(l))
		}
		start, err := parseEpoch(f[3])
		if err != nil {
			return nil, fmt.Errorf("squeue line %d: %w", i+1, err)
		}
		hs = append(hs, Holder{ID: f[0], Partition: f[1], State: f[4], Nodes: int(n), Start: start})
	}
	return hs, nil
}

// JobCheck is one job as Cancel sees it before acting.
type JobCheck struct {
	ID, User, State, Name string
}

// ParseJobCheck parses `squeue -h -t all -j ID -o '%i|%u|%T|%j'`. Empty
// output (the job is gone) gives ok=false. The job name comes last and
// may itself contain '|'.
func ParseJobCheck(out []byte) (jobs []JobCheck, err error) {
	ls, err := lines(out, "squeue")
	if err != nil {
		return nil, err
	}
	for i, l := range ls {
		f := strings.SplitN(l, "|", 4)
		if len(f) != 4 || !validID(f[0]) || f[2] == "" {
			// A job name with a newline continues on the next line; it
			// cannot be a pilot's (the tag has no newline) but it must not
			// be silently dropped either: report it as an unnamed line.
			if len(jobs) > 0 {
				jobs[len(jobs)-1].Name += "\n" + l
				continue
			}
			return nil, parseErr("squeue line %d: %q", i+1, trunc(l))
		}
		jobs = append(jobs, JobCheck{ID: f[0], User: f[1], State: f[2], Name: f[3]})
	}
	return jobs, nil
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// bytesHasAny reports whether out contains one of the needles.
func bytesHasAny(out []byte, needles ...string) bool {
	for _, n := range needles {
		if bytes.Contains(out, []byte(n)) {
			return true
		}
	}
	return false
}
