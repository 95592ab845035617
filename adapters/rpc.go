package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/harvest-hpc/harvest/cluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The gRPC service is declared by hand: each method takes and returns a
// google.protobuf.BytesValue holding JSON. This keeps the wire format
// language-neutral (any gRPC stack can serve it) without a protoc step,
// and the JSON is the same as the snapshot files of `harvest decide`.
const serviceName = "harvest.adapter.v1.Adapter"

// error kinds carried as a status detail so sentinels survive the boundary.
const (
	kindUnreachable    = "unreachable"
	kindOutcomeUnknown = "outcome-unknown"
	kindNotImplemented = "not-implemented"
	kindInvalidSpec    = "invalid-spec"
	kindNotPilot       = "not-pilot"
)

var kinds = []struct {
	kind string
	err  error
	code codes.Code
}{
	{kindUnreachable, ErrUnreachable, codes.Unavailable},
	{kindOutcomeUnknown, ErrOutcomeUnknown, codes.DeadlineExceeded},
	{kindNotImplemented, ErrNotImplemented, codes.Unimplemented},
	{kindInvalidSpec, ErrInvalidSpec, codes.InvalidArgument},
	{kindNotPilot, ErrNotPilot, codes.PermissionDenied},
}

type server struct{ impl Adapter }

// method is one unary method: decode the JSON request, call, encode.
type method func(s *server, ctx context.Context, req []byte) (any, error)

var methods = map[string]method{
	"Info": func(s *server, ctx context.Context, _ []byte) (any, error) { return s.impl.Info(ctx) },
	"Snapshot": func(s *server, ctx context.Context, _ []byte) (any, error) {
		return s.impl.Snapshot(ctx)
	},
	"Submit": func(s *server, ctx context.Context, req []byte) (any, error) {
		var spec PilotSpec
		if err := json.Unmarshal(req, &spec); err != nil {
			return nil, fmt.Errorf("%w: decode pilot spec: %v", ErrInvalidSpec, err)
		}
		id, err := s.impl.Submit(ctx, spec)
		return submitReply{ID: id}, err
	},
	"Cancel": func(s *server, ctx context.Context, req []byte) (any, error) {
		var r cancelRequest
		if err := json.Unmarshal(req, &r); err != nil {
			return nil, fmt.Errorf("decode cancel request: %w", err)
		}
		return struct{}{}, s.impl.Cancel(ctx, r.ID)
	},
	"Shrink": func(s *server, ctx context.Context, req []byte) (any, error) {
		var r shrinkRequest
		if err := json.Unmarshal(req, &r); err != nil {
			return nil, fmt.Errorf("%w: decode shrink request: %v", ErrInvalidSpec, err)
		}
		return struct{}{}, s.impl.Shrink(ctx, r.ID, r.End)
	},
	"JobEvents": func(s *server, ctx context.Context, _ []byte) (any, error) {
		jc, ok := s.impl.(JobEventCounter)
		if !ok {
			return nil, fmt.Errorf("job events: %w", ErrNotImplemented)
		}
		n, err := jc.JobEvents(ctx)
		return jobEventsReply{Count: n}, err
	},
}

type jobEventsReply struct {
	Count int64 `json:"count"`
}

type submitReply struct {
	ID PilotID `json:"id"`
}

type cancelRequest struct {
	ID PilotID `json:"id"`
}

type shrinkRequest struct {
	ID  PilotID `json:"id"`
	End int64   `json:"end"`
}

var serviceDesc = func() grpc.ServiceDesc {
	d := grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Metadata:    "harvest/adapter/v1",
	}
	d.Streams = []grpc.StreamDesc{{StreamName: "SnapshotParts", Handler: serveSnapshotParts, ServerStreams: true}}
	for _, name := range []string{"Info", "Snapshot", "Submit", "Cancel", "Shrink", "JobEvents"} {
		m := methods[name]
		d.Methods = append(d.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.BytesValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				out, err := m(srv.(*server), ctx, in.GetValue())
				if err != nil {
					return nil, toStatus(err)
				}
				b, err := json.Marshal(out)
				if err != nil {
					return nil, status.Errorf(codes.Internal, "encode reply: %v", err)
				}
				return wrapperspb.Bytes(b), nil
			},
		})
	}
	return d
}()

func toStatus(err error) error {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			st, derr := status.New(k.code, err.Error()).WithDetails(wrapperspb.String(k.kind))
			if derr != nil {
				return status.Error(k.code, err.Error())
			}
			return st.Err()
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unknown, err.Error())
}

// Client is the host side of an adapter plugin.
type Client struct{ conn *grpc.ClientConn }

var (
	_ Adapter         = (*Client)(nil)
	_ JobEventCounter = (*Client)(nil)
)

func (c *Client) call(ctx context.Context, name string, req, reply any) error {
	var body []byte
	if req != nil {
		b, err := json.Marshal(req)
		if err != nil {
			return err
		}
		body = b
	}
	out := new(wrapperspb.BytesValue)
	if err := c.conn.Invoke(ctx, "/"+serviceName+"/"+name, wrapperspb.Bytes(body), out); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("adapter %s: %w", name, ctx.Err())
		}
		return fromStatus(name, err)
	}
	if err := json.Unmarshal(out.GetValue(), reply); err != nil {
		return fmt.Errorf("adapter plugin %s: decode reply: %w", name, err)
	}
	return nil
}

// fromStatus turns a gRPC error back into the adapter's sentinels. An
// error the plugin did not classify (the plugin crashed, the call timed
// out in transit) is ErrOutcomeUnknown for Submit, since the plugin may
// have submitted, and ErrUnreachable otherwise.
func fromStatus(method string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if s, ok := d.(*wrapperspb.StringValue); ok {
			for _, k := range kinds {
				if k.kind == s.GetValue() {
					return &remoteError{msg: st.Message(), kind: k.err}
				}
			}
		}
	}
	switch st.Code() {
	case codes.Unknown:
		return errors.New(st.Message()) // the adapter's own, unclassified error
	case codes.Unimplemented:
		// A plugin built before the method existed: gRPC itself answers.
		return fmt.Errorf("adapter plugin %s: %w: %s", method, ErrNotImplemented, st.Message())
	}
	// Anything else (Unavailable, Canceled because the connection closed,
	// an interrupted stream) is a transport failure: the plugin is gone.
	if method == "Submit" {
		return fmt.Errorf("adapter plugin %s: %w: %s", method, ErrOutcomeUnknown, st.Message())
	}
	return fmt.Errorf("adapter plugin %s: %w: %s", method, ErrUnreachable, st.Message())
}

// remoteError keeps the plugin's message and the sentinel for errors.Is.
type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// Info implements Adapter.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var out Info
	err := c.call(ctx, "Info", nil, &out)
	return out, err
}

// Snapshot implements Adapter. The snapshot comes in parts
// (SnapshotParts); from a plugin built before that method, whole.
func (c *Client) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	s, err := c.snapshotParts(ctx)
	if errors.Is(err, errNoParts) {
		var out cluster.Snapshot
		err = c.call(ctx, "Snapshot", nil, &out)
		return out, err
	}
	return s, err
}

// Submit implements Adapter.
func (c *Client) Submit(ctx context.Context, spec PilotSpec) (PilotID, error) {
	var out submitReply
	if err := c.call(ctx, "Submit", spec, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// Cancel implements Adapter.
func (c *Client) Cancel(ctx context.Context, id PilotID) error {
	var out struct{}
	return c.call(ctx, "Cancel", cancelRequest{ID: id}, &out)
}

// Shrink implements Adapter.
func (c *Client) Shrink(ctx context.Context, id PilotID, end int64) error {
	var out struct{}
	return c.call(ctx, "Shrink", shrinkRequest{ID: id, End: end}, &out)
}

// JobEvents implements JobEventCounter: ErrNotImplemented when the plugin
// does not count job events (or was built before the method).
func (c *Client) JobEvents(ctx context.Context) (int64, error) {
	var out jobEventsReply
	err := c.call(ctx, "JobEvents", nil, &out)
	return out.Count, err
}
