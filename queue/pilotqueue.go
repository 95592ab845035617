package queue

import (
	"context"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// The queue in process is a pilotproto.Queue: masters and tests use it
// directly, pilots over HTTP through queue/client.
var _ pilotproto.Queue = (*Queue)(nil)

// Results implements pilotproto.Queue (ReportResults under the contract's name).
func (q *Queue) Results(ctx context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	return q.ReportResults(ctx, req)
}

// A site's pool is a pilotproto.Queue too: the API serves each site's
// pilots through theirs.
var _ pilotproto.Queue = Pool{}

// Results implements pilotproto.Queue (ReportResults under the contract's name).
func (p Pool) Results(ctx context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	return p.ReportResults(ctx, req)
}
