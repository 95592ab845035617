package sim

import (
	"slices"

	simcluster "github.com/harvest-hpc/harvest/adapters/sim"
)

// load puts the workload's jobs of the window [from, to) on the cluster
// (at its time from), and with cfg.Warm the jobs the trace shows running
// or queued at from. It returns the recorded waits of the window's foreign
// jobs, by workload id, for compareRecorded.
func load(c *simcluster.Cluster, w Workload, cfg Config, from, to int64, skip func(string)) (map[string]int64, error) {
	per := cfg.ProcsPerNode
	shared := cfg.CoresPerNode > 1
	if shared {
		per = cfg.CoresPerNode
	}
	nodes := func(j Job) int { return (j.Nodes + per - 1) / per }
	// spec is job j's: whole nodes, or with cores per node its processors
	// as cores on shared nodes.
	spec := func(j Job, label string) simcluster.JobSpec {
		s := simcluster.JobSpec{Name: j.ID, Label: label, User: j.User, Nodes: nodes(j), TimeLimit: j.TimeLimit, RunTime: j.RunTime, Submit: j.Submit}
		if shared {
			s.Cores = j.Nodes
		}
		return s
	}
	recorded := map[string]int64{}
	var running []Job // warm start: running at from, by recorded start
	for _, j := range w.Jobs {
		if j.Submit >= to {
			break // jobs are in submit order
		}
		n := nodes(j)
		if j.Submit < from {
			if cfg.Warm && !j.Calibration {
				switch end := j.Submit + j.Wait + min(j.RunTime, limitSeconds(j)); {
				case j.Wait < 0:
					skip("warm-start jobs without a recorded wait")
				case end <= from:
				case n > cfg.Nodes:
					skip("warm-start jobs wider than the cluster")
				case j.Submit+j.Wait < from:
					running = append(running, j)
				default: // queued at from, since its submit
					if _, err := c.AddJob(spec(j, "warm")); err != nil {
						return nil, err
					}
				}
			}
			continue
		}
		if n > cfg.Nodes {
			skip("jobs wider than the cluster")
			continue
		}
		if j.Calibration && cfg.Mode != Baseline {
			if err := c.AddWork(simcluster.Work{ID: j.ID, User: harvestUser(j.User), Submit: j.Submit, NodeSeconds: int64(n) * j.RunTime, TaskSeconds: cfg.TaskSeconds}); err != nil {
				skip("calibration jobs without work")
			}
			continue
		}
		label := "foreign"
		if j.Calibration {
			label = "calibration"
		} else if j.Wait >= 0 {
			recorded[j.ID] = j.Wait
		}
		if _, err := c.AddJob(spec(j, label)); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(running, func(a, b Job) int { return int(min(max(a.Submit+a.Wait-b.Submit-b.Wait, -1), 1)) })
	for _, j := range running {
		if _, err := c.AddRunning(spec(j, "warm"), j.Submit+j.Wait); err != nil {
			skip("warm-start jobs that did not fit")
		}
	}
	return recorded, nil
}

// limitSeconds is a job's limit in seconds (the run time if unlimited).
func limitSeconds(j Job) int64 {
	if j.TimeLimit.IsUnlimited() {
		return j.RunTime
	}
	return int64(j.TimeLimit)
}
