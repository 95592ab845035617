package slurm

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// ParseConfig parses `scontrol show config`: "Key = Value" lines (the
// header, blank lines and the controller status lines at the end are
// skipped). A value may hold spaces ("2 sec"). No key at all is an error.
func ParseConfig(out []byte) (map[string]string, error) {
	ls, err := lines(out, "scontrol show config")
	if err != nil {
		return nil, err
	}
	conf := map[string]string{}
	for _, l := range ls {
		k, v, ok := strings.Cut(l, " = ")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); k == "" || strings.ContainsAny(k, " \t") {
			continue
		}
		conf[k] = strings.TrimSpace(v)
	}
	if len(conf) == 0 {
		return nil, parseErr("scontrol show config printed no Key = Value line")
	}
	return conf, nil
}

// preemptOff is Config.PreemptPartition's value that turns the detection off.
const preemptOff = "none"

// DetectPreemption tells whether pilots may use a preemptible partition
// for the harvested partition h: a partition over the same nodes, of a
// lower PriorityTier, whose jobs h's jobs preempt at once. want is the
// configured partition ("" = the lowest-tier one that qualifies; "none" =
// off). It returns nil when there is no candidate at all; otherwise the
// Preemption says whether it is usable and, if not, why (docs/slurm.md,
// "What SLURM does for the give-back modes", has the measurements behind
// each rule):
//
//   - PreemptType must be preempt/partition_prio (qos-based preemption is
//     not detected);
//   - the partition's PreemptMode must be CANCEL or REQUEUE (SUSPEND keeps
//     the node; OFF does not preempt);
//   - PreemptExemptTime must be 0: pilots are preemptible from their
//     first second;
//   - a GraceTime needs SlurmctldParameters=preempt_send_user_signal, or
//     the pilot (the batch script) gets no SIGTERM at preemption and holds
//     its node for the grace plus up to 30 s.
//
// A usable tier without SchedulerParameters=preempt_youngest_first gets a
// Problem to watch for: SLURM then preempts the oldest pilots first (for
// one-node pilots preempt/partition_prio's key is equal, so the job list's
// order decides), and the pilots' master usually runs on the oldest, so
// most preemptions force a master hand-over.
func DetectPreemption(conf map[string]string, parts []Partition, h Partition, want string) *adapters.Preemption {
	if want == preemptOff {
		return nil
	}
	var cand *Partition
	for i := range parts {
		p := &parts[i]
		if p.Name == h.Name {
			continue
		}
		if want != "" {
			if p.Name == want {
				cand = p
			}
			continue
		}
		if p.Nodes == h.Nodes && p.PriorityTier < h.PriorityTier && (cand == nil || p.PriorityTier < cand.PriorityTier) {
			cand = p
		}
	}
	if cand == nil {
		if want != "" {
			return &adapters.Preemption{Partition: want, Problem: fmt.Sprintf("partition %q does not exist", want)}
		}
		return nil
	}
	pr := &adapters.Preemption{Partition: cand.Name, Mode: cand.PreemptMode, GraceTime: cand.GraceTime}
	if pr.Mode == "" {
		pr.Mode = conf["PreemptMode"]
	}
	exempt := conf["PreemptExemptTime"]
	switch {
	case conf["PreemptType"] != "preempt/partition_prio":
		pr.Problem = fmt.Sprintf("PreemptType is %q; harvest needs preempt/partition_prio", conf["PreemptType"])
	case cand.Nodes != h.Nodes:
		pr.Problem = fmt.Sprintf("partition %s is over nodes %s, partition %s over %s: pilots would run where harvest does not look", cand.Name, cand.Nodes, h.Name, h.Nodes)
	case cand.PriorityTier >= h.PriorityTier:
		pr.Problem = fmt.Sprintf("partition %s has PriorityTier %d, not below %s's %d: its jobs are not preempted for %s's", cand.Name, cand.PriorityTier, h.Name, h.PriorityTier, h.Name)
	case pr.Mode != "CANCEL" && pr.Mode != "REQUEUE":
		pr.Problem = fmt.Sprintf("partition %s has PreemptMode %s; harvest needs CANCEL or REQUEUE (the node must be freed)", cand.Name, pr.Mode)
	case exempt != "" && exempt != "00:00:00" && exempt != "-1" && exempt != "NONE" && exempt != "0":
		pr.Problem = fmt.Sprintf("PreemptExemptTime is %s; it must be 0 so a pilot is preemptible from its first second", exempt)
	case cand.GraceTime > 0 && !hasParam(conf["SlurmctldParameters"], "preempt_send_user_signal"):
		pr.Problem = fmt.Sprintf("partition %s has GraceTime=%d but SlurmctldParameters lacks preempt_send_user_signal: a preempted pilot gets no SIGTERM and holds its node %d s plus up to 30 s", cand.Name, cand.GraceTime, cand.GraceTime)
	default:
		pr.Usable = true
		if !hasParam(conf["SchedulerParameters"], "preempt_youngest_first") {
			pr.Problem = "SchedulerParameters lacks preempt_youngest_first: SLURM preempts the oldest pilots first, where the pilots' master usually runs, so most preemptions force a master hand-over"
		}
	}
	return pr
}

// hasParam reports whether a comma-separated parameter list holds name
// (alone or as name=value).
func hasParam(list, name string) bool {
	for _, p := range strings.Split(list, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(p), "="); k == name {
			return true
		}
	}
	return false
}

// TimeMinSizes reports whether backfill sizes a --time-min job to the hole:
// SLURM 25.11 and later (commit dedc92b367; from 20.02.5 to 25.05 backfill
// sets the limit to TimeMin), unless time_min_as_soft_limit (23.11 on)
// makes TimeMin the limit.
func TimeMinSizes(version string, conf map[string]string) bool {
	return versionAtLeast(version, 25, 11) && !hasParam(conf["SchedulerParameters"], "time_min_as_soft_limit")
}

// versionAtLeast compares a SLURM version ("22.05.8") with major.minor.
func versionAtLeast(v string, major, minor int) bool {
	f := strings.SplitN(v, ".", 3)
	if len(f) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(f[0])
	mi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// pilotEndFormat lists our running pilots with their end (squeue %e, Unix
// seconds with SLURM_TIME_FORMAT=%s).
const pilotEndFormat = "%i|%e"

// ParsePilotEnds parses `squeue ... -o '%i|%e'` into job id -> end (Unix
// seconds). An end that is not a time (N/A, Unknown) is left out.
func ParsePilotEnds(out []byte) (map[string]int64, error) {
	ls, err := lines(out, "squeue")
	if err != nil {
		return nil, err
	}
	ends := map[string]int64{}
	for i, l := range ls {
		id, e, ok := strings.Cut(strings.TrimSpace(l), "|")
		if !ok || !validID(id) {
			return nil, parseErr("pilot end line %d: %q", i+1, trunc(l))
		}
		t, err := parseEpoch(e)
		if err != nil {
			return nil, fmt.Errorf("pilot end line %d: %w", i+1, err)
		}
		if t > 0 {
			ends[id] = t
		}
	}
	return ends, nil
}

// ApplyTier finishes the job list for the preemptible tier pre (nil: none)
// and the running pilots' ends: pilots in the tier are marked
// Preemptible; other users' jobs in it are dropped (they wait for nobody
// and are preempted like ours); a running pilot whose end comes before
// its start plus its limit gets the shorter limit.
func ApplyTier(jobs []cluster.Job, pre *adapters.Preemption, ends map[string]int64) []cluster.Job {
	out := jobs[:0]
	for _, j := range jobs {
		if pre != nil && j.Partition == pre.Partition {
			if !j.Pilot {
				continue
			}
			j.Preemptible = true
		}
		if e, ok := ends[j.ID]; ok && j.Pilot && j.State == cluster.Running && j.StartTime > 0 && e > j.StartTime {
			if l := cluster.Limit(e - j.StartTime); j.TimeLimit.IsUnlimited() || l < j.TimeLimit {
				j.TimeLimit = l
			}
		}
		out = append(out, j)
	}
	return out
}
