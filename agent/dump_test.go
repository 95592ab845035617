package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// A dumped snapshot, written a job and a node at a time, reads back as
// the snapshot it was, with and without nodes, and with no job at all.
func TestADumpedSnapshotReadsBackWhole(t *testing.T) {
	mt := cluster.Limit(3600)
	full := cluster.Snapshot{Now: 1795290000, TotalNodes: 3, IdleNodes: 1, MaxTime: &mt, Partition: "batch", MinNodes: 1,
		Demand: &cluster.Demand{PendingTasks: 7, SlotsPerNode: 4}}
	for i := 0; i < 5; i++ {
		full.Jobs = append(full.Jobs, cluster.Job{ID: fmt.Sprint(100 + i), User: "alice", State: cluster.Pending, Nodes: 1,
			TimeLimit: cluster.Unlimited, Name: "a \"quoted\"\nname", Priority: float64(i)})
	}
	full.Nodes = []cluster.Node{{Name: "n1", State: cluster.NodeState("idle"), CPUs: 8}, {Name: "n2", State: cluster.NodeState("allocated")}}
	noNodes := full
	noNodes.Nodes = nil
	empty := cluster.Snapshot{Now: 5, Jobs: []cluster.Job{}}
	dir := t.TempDir()
	for name, s := range map[string]cluster.Snapshot{"full": full, "no nodes": noNodes, "no jobs": empty} {
		path := filepath.Join(dir, "s.json")
		if err := writeSnapshot(path, s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var got cluster.Snapshot
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: the dump is not JSON: %v\n%s", name, err, b)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("%s: read back\n%+v\nwant\n%+v\n%s", name, got, s, b)
		}
		if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
			t.Errorf("%s: the temporary file is left: %v", name, err)
		}
	}
}
