package pilotproto

import "context"

// Queue is the contract between a master and the queue: the pilot
// endpoints above as Go calls. The queue in process (*queue.Queue) and
// its HTTP client (*client.Client) implement it; pilotproto/contract is
// the one conformance suite every implementation passes. Errors wrap the
// sentinels of queue/api: ErrStaleEpoch (a newer master exists: stop),
// ErrLeaseExpired (renew, then retry).
type Queue interface {
	// Lease asks for, renews (with Epoch) or releases (Release) the master
	// lease; pilots that are not master learn from it where the master is.
	Lease(ctx context.Context, req LeaseRequest) (Lease, error)
	// Pull takes up to req.Max waiting tasks in fair-share order, marked
	// assigned to req.Epoch, and the jobs cancelled since the last exchange.
	Pull(ctx context.Context, req PullRequest) (PullResponse, error)
	// Results applies results once per (task, attempt): a repeat is
	// acknowledged as a duplicate.
	Results(ctx context.Context, req ResultsRequest) (ResultsResponse, error)
	// Heartbeat keeps the listed tasks alive, renews the lease and lists
	// cancelled jobs. A new epoch's first heartbeat requeues the active
	// tasks of older epochs it does not list.
	Heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatResponse, error)
	// Recommend records the MiniNode recommendation and demand figures.
	Recommend(ctx context.Context, req RecommendationRequest) error
}
