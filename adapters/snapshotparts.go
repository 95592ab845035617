package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/harvest-hpc/harvest/cluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A snapshot crosses the plugin boundary in parts: a head (the snapshot
// without its jobs and nodes, and how many of each follow), then the jobs
// and the nodes partSize at a time, each part a BytesValue of JSON like
// the unary methods. Whole, the largest snapshot the SLURM adapter's
// defaults accept (300,000 jobs on 100,000 nodes) is a 60 MB message,
// which the agent held three times over (the gRPC buffer, its copy in
// the BytesValue, the decoded snapshot): 527 MB of peak RSS. In parts,
// only the decoded snapshot is whole.
const partSize = 2000

// maxPrealloc bounds the room made for the jobs or nodes a head
// announces: past it the slices grow as the parts come.
const maxPrealloc = 1 << 20

// snapshotPart is one message of SnapshotParts: exactly one field is set.
type snapshotPart struct {
	Head  *snapshotHead  `json:"head,omitempty"`
	Jobs  []cluster.Job  `json:"jobs,omitempty"`
	Nodes []cluster.Node `json:"nodes,omitempty"`
}

type snapshotHead struct {
	Snapshot cluster.Snapshot `json:"snapshot"` // without jobs and nodes
	Jobs     int              `json:"jobs"`
	Nodes    int              `json:"nodes"`
}

// errNoParts: the plugin does not serve SnapshotParts (built before it).
var errNoParts = errors.New("plugin has no SnapshotParts")

func serveSnapshotParts(srv any, stream grpc.ServerStream) error {
	if err := stream.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
		return err
	}
	s, err := srv.(*server).impl.Snapshot(stream.Context())
	if err != nil {
		return toStatus(err)
	}
	send := func(p snapshotPart) error {
		b, err := json.Marshal(p)
		if err != nil {
			return status.Errorf(codes.Internal, "encode snapshot part: %v", err)
		}
		return stream.SendMsg(wrapperspb.Bytes(b))
	}
	jobs, nodes := s.Jobs, s.Nodes
	s.Jobs, s.Nodes = nil, nil
	if err := send(snapshotPart{Head: &snapshotHead{Snapshot: s, Jobs: len(jobs), Nodes: len(nodes)}}); err != nil {
		return err
	}
	for i := 0; i < len(jobs); i += partSize {
		if err := send(snapshotPart{Jobs: jobs[i:min(i+partSize, len(jobs))]}); err != nil {
			return err
		}
	}
	for i := 0; i < len(nodes); i += partSize {
		if err := send(snapshotPart{Nodes: nodes[i:min(i+partSize, len(nodes))]}); err != nil {
			return err
		}
	}
	return nil
}

// snapshotParts receives a snapshot in parts. The strings most jobs
// share (user, state, partition, reason) are kept once each.
func (c *Client) snapshotParts(ctx context.Context) (cluster.Snapshot, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream on every error path
	fail := func(err error) (cluster.Snapshot, error) {
		if ctx.Err() != nil {
			return cluster.Snapshot{}, fmt.Errorf("adapter Snapshot: %w", ctx.Err())
		}
		if status.Code(err) == codes.Unimplemented {
			return cluster.Snapshot{}, errNoParts
		}
		return cluster.Snapshot{}, fromStatus("Snapshot", err)
	}
	stream, err := c.conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "SnapshotParts", ServerStreams: true},
		"/"+serviceName+"/SnapshotParts")
	if err != nil {
		return fail(err)
	}
	if err := stream.SendMsg(wrapperspb.Bytes(nil)); err != nil && err != io.EOF {
		return fail(err)
	}
	if err := stream.CloseSend(); err != nil {
		return fail(err)
	}
	var (
		s      cluster.Snapshot
		head   *snapshotHead
		intern = map[string]string{}
		jobs   = make([]cluster.Job, 0, partSize)
		nodes  = make([]cluster.Node, 0, partSize)
	)
	in := func(v string) string {
		if w, ok := intern[v]; ok {
			return w
		}
		intern[v] = v
		return v
	}
	for {
		msg := new(wrapperspb.BytesValue)
		err := stream.RecvMsg(msg)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
		// The parts are decoded into the same two slices (cleared, since
		// json leaves a field the part omits as it was), which are only
		// read from: growing a fresh slice for every part was half of
		// what a snapshot's decoding allocated.
		clear(jobs[:cap(jobs)])
		clear(nodes[:cap(nodes)])
		p := snapshotPart{Jobs: jobs[:0], Nodes: nodes[:0]}
		if err := json.Unmarshal(msg.GetValue(), &p); err != nil {
			return cluster.Snapshot{}, fmt.Errorf("adapter plugin Snapshot: decode part: %w", err)
		}
		switch {
		case head == nil && p.Head != nil:
			head = p.Head
			s = head.Snapshot
			if head.Jobs > 0 {
				s.Jobs = make([]cluster.Job, 0, min(head.Jobs, maxPrealloc))
			}
			if head.Nodes > 0 {
				s.Nodes = make([]cluster.Node, 0, min(head.Nodes, maxPrealloc))
			}
		case head == nil || p.Head != nil:
			return cluster.Snapshot{}, errors.New("adapter plugin Snapshot: the parts do not begin with one head")
		}
		jobs, nodes = p.Jobs, p.Nodes
		for _, j := range p.Jobs {
			j.User, j.State, j.Partition, j.Reason = in(j.User), cluster.JobState(in(string(j.State))), in(j.Partition), in(j.Reason)
			s.Jobs = append(s.Jobs, j)
		}
		for _, n := range p.Nodes {
			n.State = cluster.NodeState(in(string(n.State)))
			s.Nodes = append(s.Nodes, n)
		}
		if len(s.Jobs) > head.Jobs || len(s.Nodes) > head.Nodes {
			return cluster.Snapshot{}, fmt.Errorf("adapter plugin Snapshot: more parts than the head announced (%d jobs, %d nodes)", head.Jobs, head.Nodes)
		}
	}
	if head == nil || len(s.Jobs) != head.Jobs || len(s.Nodes) != head.Nodes {
		return cluster.Snapshot{}, fmt.Errorf("adapter plugin Snapshot: %w: the parts ended early", ErrUnreachable)
	}
	return s, nil
}
