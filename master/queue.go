package master

import (
	"errors"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Queue is what the master needs from the agent's queue: the contract of
// pilotproto (the queue in process, its HTTP client, test fakes).
type Queue = pilotproto.Queue

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
