package master

import (
	"context"
	"errors"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Queue is what the master needs from the agent's queue: the pilot
// endpoints of pilotproto. The HTTP client (HTTPQueue), the in-memory
// queue (MemQueue) and test fakes implement it.
type Queue interface {
	// Lease asks for or renews the master lease (also used by pilots that
	// only want to know where the master is).
	Lease(ctx context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error)
	// Pull takes up to req.Max waiting tasks; the queue marks them
	// assigned to req.Epoch.
	Pull(ctx context.Context, req pilotproto.PullRequest) (pilotproto.PullResponse, error)
	// Report sends results; idempotent by (task id, attempt).
	Report(ctx context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error)
	// Heartbeat keeps the master's tasks alive and lists cancelled jobs.
	Heartbeat(ctx context.Context, req pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error)
	// Recommend sends the MiniNode recommendation and demand figures.
	Recommend(ctx context.Context, req pilotproto.RecommendationRequest) error
}

// ErrStaleEpoch and ErrLeaseExpired are the queue's fencing answers,
// declared once in queue/api: the master that gets ErrStaleEpoch must stop;
// one that gets ErrLeaseExpired may renew if nobody took the lease.
var (
	ErrStaleEpoch   = api.ErrStaleEpoch
	ErrLeaseExpired = api.ErrLeaseExpired
)

// ErrFenced: the checkpoint belongs to a newer epoch; this master must
// stop without writing anything more.
var ErrFenced = errors.New("fenced by a newer master")
