package replay

import (
	"errors"
	"fmt"
	"strings"
)

// ErrClusterSetup is wrapped by every ReadClusterSetup error: the cluster
// cannot be replayed on as it is configured.
var ErrClusterSetup = errors.New("cluster not ready for a replay")

// ClusterSetup is what a replay needs to know of the cluster's
// configuration (`scontrol show config`).
type ClusterSetup struct {
	// JobCompLog is the job completion log slurmctld appends to.
	JobCompLog string
	// Preemptible says whether partitions preempt by priority tier, which
	// the preemption run needs.
	Preemptible bool
}

// ReadClusterSetup reads the output of `scontrol show config`. jobcompLog,
// if not empty, overrides the log's place (the cluster must still write
// one: without it a replay cannot see when jobs started).
func ReadClusterSetup(conf, jobcompLog string) (ClusterSetup, error) {
	if !strings.Contains(conf, "SLURM_VERSION") {
		return ClusterSetup{}, fmt.Errorf("%w: `scontrol show config` printed no configuration", ErrClusterSetup)
	}
	s := ClusterSetup{JobCompLog: jobcompLog, Preemptible: configValue(conf, "PreemptType") == "preempt/partition_prio"}
	if s.JobCompLog == "" {
		s.JobCompLog = configValue(conf, "JobCompLoc")
		if configValue(conf, "JobCompType") != "jobcomp/filetxt" || s.JobCompLog == "" {
			return ClusterSetup{}, fmt.Errorf("%w: it writes no job completion log (JobCompType is %q): set JobCompType=jobcomp/filetxt and JobCompLoc in slurm.conf (scripts/minicluster.sh: JOBCOMP=1), or give --jobcomp-log",
				ErrClusterSetup, configValue(conf, "JobCompType"))
		}
	}
	return s, nil
}

// configValue reads KEY = VALUE from `scontrol show config`.
func configValue(conf, key string) string {
	for _, line := range strings.Split(conf, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
