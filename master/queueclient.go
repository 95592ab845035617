package master

import (
	"context"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/client"
)

// ClientQueue is the Queue over the agent's REST API, on top of the
// queue's Go client (persistent connections, retries of idempotent calls).
type ClientQueue struct {
	C *client.Client
}

var _ Queue = ClientQueue{}

// mapErr: the client's errors already wrap the sentinels of queue/api
// (ErrStaleEpoch, ErrLeaseExpired) by their typed code.
func mapErr(err error) error { return err }

// Lease implements Queue.
func (q ClientQueue) Lease(ctx context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	l, err := q.C.Lease(ctx, req)
	return l, mapErr(err)
}

// Pull implements Queue.
func (q ClientQueue) Pull(ctx context.Context, req pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	r, err := q.C.Pull(ctx, req)
	return r, mapErr(err)
}

// Report implements Queue.
func (q ClientQueue) Report(ctx context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	r, err := q.C.Results(ctx, req)
	return r, mapErr(err)
}

// Heartbeat implements Queue.
func (q ClientQueue) Heartbeat(ctx context.Context, req pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
	r, err := q.C.Heartbeat(ctx, req)
	return r, mapErr(err)
}

// Recommend implements Queue.
func (q ClientQueue) Recommend(ctx context.Context, req pilotproto.RecommendationRequest) error {
	return mapErr(q.C.Recommend(ctx, req))
}
