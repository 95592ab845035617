package htcondor

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/harvest-hpc/harvest/cluster"
)

// Format is the output format asked of condor_q and condor_status.
type Format string

const (
	// FormatJSON is `-json`: a JSON array of ads, parsed strictly by
	// encoding/json, with names and types intact (unlike -af, whose
	// columns carry neither, and which prints "undefined" for missing
	// values). The default.
	FormatJSON Format = "json"
	// FormatLong is `-long`: the ClassAd "Name = value" format, a fallback
	// where -json output is unusable.
	FormatLong Format = "long"
)

// readAds reads ads in format f as they come, handing each to each; more
// than max is an error.
func readAds(r io.Reader, f Format, max int, each func(ad) error) error {
	switch f {
	case FormatJSON:
		return readJSONAds(r, max, each)
	case FormatLong:
		return readLongAds(r, max, each)
	}
	return fmt.Errorf("unknown output format %q", f)
}

// Job statuses (the JobStatus attribute).
const (
	statusIdle      = 1
	statusRunning   = 2
	statusRemoved   = 3
	statusCompleted = 4
	statusHeld      = 5
	statusTransfer  = 6 // transferring output: still holds its slot
	statusSuspended = 7 // suspended: still holds its slot
)

// Universes (the JobUniverse attribute). Scheduler and local universe
// jobs (DAGMan) run on the submit machine and grid universe jobs on a
// remote site: none of them runs on the pool's machines.
const (
	universeScheduler = 7
	universeGrid      = 9
	universeParallel  = 11
	universeLocal     = 12
)

// JobAd is the part of a job ClassAd the adapter uses.
type JobAd struct {
	Cluster, Proc int64
	Owner         string
	Status        int
	Universe      int
	// RequestCPUs/RequestMemoryMB are 0 when not a literal (HTCondor's
	// default request_memory is an expression of the image size).
	RequestCPUs     int64
	RequestMemoryMB int64
	Prio            int64
	QDate           int64
	CurrentStart    int64 // JobCurrentStartDate, 0 if never started
	ServerTime      int64 // the schedd's clock when it answered
	RemoteHost      string
	MinHosts        int64
	PilotTag        string // HarvestPilot attribute
	BatchName       string
	// Limit is the job's lifetime limit found in its ad (HarvestLifetime,
	// AllowedJobDuration, AllowedExecuteDuration, the configured extra
	// attributes, or a periodic_remove of the documented shape); Unlimited
	// (or 0) if none.
	Limit cluster.Limit
}

// ID is the job id in HTCondor's "cluster.proc" form.
func (j JobAd) ID() string { return fmt.Sprintf("%d.%d", j.Cluster, j.Proc) }

// jobAttributes is the projection asked of condor_q (-attributes): the
// schedd sends only these, which keeps a large queue cheap to read.
var jobAttributes = []string{
	"ClusterId", "ProcId", "Owner", "JobStatus", "JobUniverse",
	"RequestCpus", "RequestMemory", "JobPrio", "QDate",
	"JobCurrentStartDate", "ServerTime", "RemoteHost", "MinHosts",
	attrPilot, attrLifetime, "JobBatchName", "AllowedJobDuration", "AllowedExecuteDuration", "PeriodicRemove",
}

// Attributes the adapter sets on its pilots.
const (
	attrPilot    = "HarvestPilot"
	attrLifetime = "HarvestLifetime"
)

// ParseCondorQ parses `condor_q -json` (or -long) output into job ads.
// limitAttrs names extra attributes that hold a lifetime limit in seconds
// at this site (e.g. "MaxRuntime"). Empty output is an empty queue.
func ParseCondorQ(data []byte, f Format, limitAttrs []string) ([]JobAd, error) {
	return ReadCondorQ(bytes.NewReader(data), f, limitAttrs, maxAds)
}

// ReadCondorQ is ParseCondorQ on output as it is read: each ad is kept as
// a JobAd only, and more than max ads is refused while reading.
func ReadCondorQ(r io.Reader, f Format, limitAttrs []string, max int) ([]JobAd, error) {
	var out []JobAd
	err := readAds(r, f, max, func(a ad) error {
		j, err := jobFromAd(a, limitAttrs)
		if err != nil {
			return malformed("job ad %d: %v", len(out), err)
		}
		out = append(out, j)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func jobFromAd(a ad, limitAttrs []string) (JobAd, error) {
	var j JobAd
	var ok bool
	if j.Cluster, ok = a.integer("ClusterId"); !ok || j.Cluster < 0 {
		return j, fmt.Errorf("no integer ClusterId")
	}
	if j.Proc, ok = a.integer("ProcId"); !ok || j.Proc < 0 {
		return j, fmt.Errorf("job %d: no integer ProcId", j.Cluster)
	}
	st, ok := a.integer("JobStatus")
	if !ok || st < 0 || st > statusSuspended {
		return j, fmt.Errorf("job %s: JobStatus missing or unknown", j.ID())
	}
	j.Status = int(st)
	if u, ok := a.integer("JobUniverse"); ok {
		j.Universe = int(u)
	}
	j.Owner, _ = a.str("Owner")
	j.RequestCPUs, _ = a.integer("RequestCpus")
	j.RequestMemoryMB, _ = a.integer("RequestMemory")
	j.Prio, _ = a.integer("JobPrio")
	j.QDate, _ = a.integer("QDate")
	j.CurrentStart, _ = a.integer("JobCurrentStartDate")
	j.ServerTime, _ = a.integer("ServerTime")
	j.RemoteHost, _ = a.str("RemoteHost")
	j.MinHosts, _ = a.integer("MinHosts")
	j.PilotTag, _ = a.str(attrPilot)
	j.BatchName, _ = a.str("JobBatchName")
	if j.RequestCPUs < 0 || j.RequestMemoryMB < 0 || j.QDate < 0 || j.CurrentStart < 0 || j.ServerTime < 0 {
		return j, fmt.Errorf("job %s: negative request or date", j.ID())
	}
	j.Limit = jobLimit(a, limitAttrs)
	return j, nil
}

// jobLimit returns the smallest lifetime limit the ad states.
func jobLimit(a ad, limitAttrs []string) cluster.Limit {
	lim := cluster.Unlimited
	consider := func(v int64) {
		if v > 0 {
			lim = lim.Min(cluster.Limit(v))
		}
	}
	// AllowedJobDuration bounds the job's whole run, AllowedExecuteDuration
	// its execution (HTCondor 9.x and later): past either the job is put on
	// hold and leaves its slot.
	for _, name := range append([]string{attrLifetime, "AllowedJobDuration", "AllowedExecuteDuration"}, limitAttrs...) {
		if v, ok := a.integer(name); ok {
			consider(v)
		}
	}
	if e, ok := a.expression("PeriodicRemove"); ok {
		if v, ok := periodicRemoveLimit(string(e)); ok {
			consider(v)
		}
	}
	return lim
}

// periodicRemoveRE matches the documented way to bound a job's run time,
// "(time() - JobCurrentStartDate) > N" (or CurrentTime, or
// EnteredCurrentStatus, which equals the start time of a running job),
// with N a product of integers (60 * 60).
var periodicRemoveRE = regexp.MustCompile(`(?i)\(\s*(?:time\(\s*\)|CurrentTime)\s*-\s*(?:JobCurrentStartDate|EnteredCurrentStatus)\s*\)\s*>=?\s*\(?\s*(\d+(?:\s*\*\s*\d+)*)`)

// periodicRemoveLimit finds a run-time bound in a periodic_remove
// expression. An expression of another shape gives no limit: the adapter
// does not evaluate ClassAds, and a guessed limit would be worse than none.
func periodicRemoveLimit(e string) (int64, bool) {
	m := periodicRemoveRE.FindStringSubmatch(e)
	if m == nil {
		return 0, false
	}
	v := int64(1)
	for _, f := range strings.Split(m[1], "*") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 0 || (n > 0 && v > (1<<53)/n) {
			return 0, false
		}
		v *= n
	}
	return v, v > 0
}

// SlotAd is the part of a machine (slot) ClassAd the adapter uses.
type SlotAd struct {
	Name, Machine   string
	State, Activity string
	Partitionable   bool
	Dynamic         bool
	CPUs            int64 // unclaimed CPUs of a partitionable slot; the slot's own otherwise
	TotalSlotCPUs   int64
	MemoryMB        int64
	TotalSlotMemMB  int64
}

var slotAttributes = []string{
	"Name", "Machine", "State", "Activity", "SlotType", "PartitionableSlot", "DynamicSlot",
	"Cpus", "TotalSlotCpus", "Memory", "TotalSlotMemory",
}

// ParseCondorStatus parses `condor_status -json` (or -long) output into
// slot ads. A pool without a single slot is refused: it is far more
// likely a wrong pool name or constraint than a real, empty pool, and an
// empty picture would make the agent give up every pilot.
func ParseCondorStatus(data []byte, f Format) ([]SlotAd, error) {
	return ReadCondorStatus(bytes.NewReader(data), f, maxAds)
}

// ReadCondorStatus is ParseCondorStatus on output as it is read; more
// than max slot ads is refused while reading.
func ReadCondorStatus(r io.Reader, f Format, max int) ([]SlotAd, error) {
	var out []SlotAd
	err := readAds(r, f, max, func(a ad) error {
		s, err := slotFromAd(a)
		if err != nil {
			return malformed("slot ad %d: %v", len(out), err)
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, malformed("condor_status listed no slots")
	}
	return out, nil
}

func slotFromAd(a ad) (SlotAd, error) {
	var s SlotAd
	s.Name, _ = a.str("Name")
	s.Machine, _ = a.str("Machine")
	if s.Machine == "" {
		// Machine is always advertised; fall back to the host part of
		// slotN@host rather than refusing an otherwise good ad.
		if _, host, ok := strings.Cut(s.Name, "@"); ok {
			s.Machine = host
		}
	}
	if s.Machine == "" {
		return s, fmt.Errorf("slot %q has no Machine", s.Name)
	}
	var ok bool
	if s.State, ok = a.str("State"); !ok || s.State == "" {
		return s, fmt.Errorf("slot %q has no State", s.Name)
	}
	s.Activity, _ = a.str("Activity")
	slotType, _ := a.str("SlotType")
	s.Partitionable, _ = a.boolean("PartitionableSlot")
	s.Dynamic, _ = a.boolean("DynamicSlot")
	s.Partitionable = s.Partitionable || strings.EqualFold(slotType, "Partitionable")
	s.Dynamic = s.Dynamic || strings.EqualFold(slotType, "Dynamic")
	if s.CPUs, ok = a.integer("Cpus"); !ok || s.CPUs < 0 {
		return s, fmt.Errorf("slot %q has no integer Cpus", s.Name)
	}
	s.MemoryMB, _ = a.integer("Memory")
	s.TotalSlotCPUs, _ = a.integer("TotalSlotCpus")
	s.TotalSlotMemMB, _ = a.integer("TotalSlotMemory")
	if s.TotalSlotCPUs <= 0 {
		s.TotalSlotCPUs = s.CPUs
	}
	if s.TotalSlotMemMB <= 0 {
		s.TotalSlotMemMB = s.MemoryMB
	}
	if s.MemoryMB < 0 || s.TotalSlotCPUs < s.CPUs || s.TotalSlotMemMB < s.MemoryMB {
		return s, fmt.Errorf("slot %q: resources do not add up", s.Name)
	}
	if s.TotalSlotCPUs > maxSlotCPUs || s.TotalSlotMemMB > maxSlotMemMB {
		// A startd advertising garbage: two such slots of one machine
		// summed past int64 into a negative CPU count.
		return s, fmt.Errorf("slot %q: %d CPUs and %d MB are more than any machine has (at most %d CPUs, %d MB)",
			s.Name, s.TotalSlotCPUs, s.TotalSlotMemMB, int64(maxSlotCPUs), int64(maxSlotMemMB))
	}
	return s, nil
}

// Bounds of one slot's figures: far above any machine, far below what
// summing a machine's slots could overflow.
const (
	maxSlotCPUs  = 1 << 20
	maxSlotMemMB = 1 << 40 // 1 EiB
)

var (
	terseRE   = regexp.MustCompile(`(?m)^\s*(\d+)\.(\d+)\s*-\s*\d+\.\d+\s*$`)
	clusterRE = regexp.MustCompile(`(?m)^\s*\d+ job\(s\) submitted to cluster (\d+)\.`)
)

// ParseSubmit reads the job id from condor_submit's answer: the -terse
// form "12.0 - 12.0", or the classic "1 job(s) submitted to cluster 12.".
func ParseSubmit(out []byte) (string, error) {
	if m := terseRE.FindSubmatch(out); m != nil {
		return string(m[1]) + "." + string(m[2]), nil
	}
	if m := clusterRE.FindSubmatch(out); m != nil {
		return string(m[1]) + ".0", nil
	}
	return "", malformed("no job id in condor_submit output %.200q", out)
}

var versionRE = regexp.MustCompile(`\$CondorVersion:\s*([0-9]+(?:\.[0-9]+)*)`)

// ParseVersion reads the version from condor_version's first line
// ("$CondorVersion: 23.0.3 2024-01-04 BuildID: ... $").
func ParseVersion(out []byte) (string, error) {
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", malformed("no $CondorVersion in %.120q", out)
	}
	return string(m[1]), nil
}
