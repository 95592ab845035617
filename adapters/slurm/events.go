package slurm

import (
	"context"
	"fmt"

	"github.com/harvest-hpc/harvest/adapters"
)

var _ adapters.JobEventCounter = (*Adapter)(nil)

// JobEvents implements adapters.JobEventCounter with sdiag: one
// REQUEST_STATS_INFO RPC, which slurmctld answers from its counters
// without locking or packing the job list (22.05 _slurm_rpc_dump_stats),
// unlike squeue. The sum of "Jobs submitted", "completed", "canceled" and
// "failed" moves with every submission, end and cancel, pilots' included
// (slurmctld resets them at midnight and on `sdiag -r`: only a change
// counts). Any user may ask; only a reset needs an operator.
func (a *Adapter) JobEvents(ctx context.Context) (int64, error) {
	out, err := a.query(ctx, a.cfg.binary("sdiag", a.cfg.Sdiag), nil)
	if err != nil {
		return 0, fmt.Errorf("slurm job events: %w", err)
	}
	n, err := ParseSdiag(out)
	if err != nil {
		return 0, fmt.Errorf("slurm job events: %w", err)
	}
	return n, nil
}
