package replay

import (
	"errors"
	"fmt"

	"github.com/harvest-hpc/harvest/adapters/slurm"
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
	// The SLURM adapter's parser: "Key = Value" lines, values with "=" or
	// spaces kept whole.
	c, err := slurm.ParseConfig([]byte(conf))
	if err != nil || c["SLURM_VERSION"] == "" {
		return ClusterSetup{}, fmt.Errorf("%w: `scontrol show config` printed no configuration", ErrClusterSetup)
	}
	s := ClusterSetup{JobCompLog: jobcompLog, Preemptible: c["PreemptType"] == "preempt/partition_prio"}
	if s.JobCompLog == "" {
		s.JobCompLog = c["JobCompLoc"]
		if c["JobCompType"] != "jobcomp/filetxt" || s.JobCompLog == "" {
			return ClusterSetup{}, fmt.Errorf("%w: it writes no job completion log (JobCompType is %q): set JobCompType=jobcomp/filetxt and JobCompLoc in slurm.conf (scripts/minicluster.sh: JOBCOMP=1), or give --jobcomp-log",
				ErrClusterSetup, c["JobCompType"])
		}
	}
	return s, nil
}
