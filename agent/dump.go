package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/harvest-hpc/harvest/cluster"
)

// writeSnapshot writes s as JSON (a `harvest decide` snapshot) a job and a
// node at a time, one to a line, through a buffered file. The largest
// snapshot the SLURM adapter's defaults accept is about 90 MB of indented
// JSON, which MarshalIndent held whole (and copied on the way to the
// file): with --dump-snapshots it took the agent past 300 MB.
func writeSnapshot(path string, s cluster.Snapshot) (err error) {
	jobs, nodes := s.Jobs, s.Nodes
	s.Jobs, s.Nodes = nil, nil
	head, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	// jobs is the last field but nodes (omitted when nil), and never omitted.
	head, ok := bytes.CutSuffix(head, []byte("\n  \"jobs\": null\n}"))
	if !ok {
		return errors.New("dump snapshot: the snapshot's encoding does not end with its jobs")
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			f.Close()
		}
		if err != nil {
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 64<<10)
	w.Write(head)
	list := func(name string, n int, item func(int) any) error {
		fmt.Fprintf(w, "\n  %q: [", name)
		for i := 0; i < n; i++ {
			b, err := json.Marshal(item(i))
			if err != nil {
				return err
			}
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString("\n    ")
			w.Write(b)
		}
		if n > 0 {
			w.WriteString("\n  ")
		}
		w.WriteByte(']')
		return nil
	}
	if err := list("jobs", len(jobs), func(i int) any { return jobs[i] }); err != nil {
		return err
	}
	if len(nodes) > 0 {
		w.WriteByte(',')
		if err := list("nodes", len(nodes), func(i int) any { return nodes[i] }); err != nil {
			return err
		}
	}
	w.WriteString("\n}\n")
	if err := w.Flush(); err != nil {
		return err
	}
	closed = true
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
