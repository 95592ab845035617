package adapters

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// fixed is an adapter whose snapshot is s.
type fixed struct {
	Adapter
	s cluster.Snapshot
}

func (f fixed) Snapshot(context.Context) (cluster.Snapshot, error) { return f.s, nil }

// across serves impl with desc over an in-memory connection and returns
// the host's client.
func across(t *testing.T, desc grpc.ServiceDesc, impl Adapter) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	srv.RegisterService(&desc, &server{impl: impl})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///plugin",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Client{conn: conn}
}

func bigSnapshot() cluster.Snapshot {
	mt := cluster.Limit(86400)
	s := cluster.Snapshot{Now: 1795290000, TotalNodes: 2*partSize + 1, IdleNodes: 7, MaxTime: &mt, Partition: "batch"}
	for i := 0; i < 2*partSize+3; i++ {
		s.Jobs = append(s.Jobs, cluster.Job{ID: fmt.Sprint(1000 + i), User: fmt.Sprint("u", i%7), State: cluster.Pending,
			Nodes: 1 + i%4, TimeLimit: cluster.Limit(60 * (i + 1)), Reason: "Priority", Partition: "batch",
			Pilot: i%5 == 0, ExpectedStart: int64(1795290000 + i), Priority: float64(i)})
	}
	for i := 0; i < 2*partSize+1; i++ {
		s.Nodes = append(s.Nodes, cluster.Node{Name: fmt.Sprintf("n%05d", i), State: cluster.NodeState("idle"), CPUs: 64})
	}
	return s
}

// A snapshot of several parts' worth of jobs and nodes arrives whole and
// in order, as it does from a plugin built before SnapshotParts (which
// sends it in one message).
func TestASnapshotCrossesThePluginInPartsWhole(t *testing.T) {
	want := bigSnapshot()
	old := serviceDesc
	old.Streams = nil
	for name, desc := range map[string]grpc.ServiceDesc{"in parts": serviceDesc, "old plugin, whole": old} {
		got, err := across(t, desc, fixed{s: want}).Snapshot(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the snapshot changed across the plugin: %d jobs, %d nodes, want %d, %d",
				name, len(got.Jobs), len(got.Nodes), len(want.Jobs), len(want.Nodes))
		}
	}
	empty := cluster.Snapshot{Now: 5, Jobs: []cluster.Job{}}
	if got, err := across(t, serviceDesc, fixed{s: empty}).Snapshot(context.Background()); err != nil || got.Now != 5 || len(got.Jobs)+len(got.Nodes) != 0 {
		t.Errorf("empty snapshot: %+v, %v", got, err)
	}
}
