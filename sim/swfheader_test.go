package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ctcHeader is the top of CTC-SP2-1996-3.1-cln.swf: its MaxNodes carries a
// note after the value, Information continues on the next line.
const ctcHeader = `; Version: 2.2
; Computer: IBM SP2
; Installation: Cornell Theory Center (CTC)
; Information: http://www.tc.cornell.edu/
;              http://www.cs.huji.ac.il/labs/parallel/workload/
; MaxJobs: 79302
; UnixStartTime: 835823160
; MaxNodes: 338 (batch partition; 512 total)
; MaxProcs: 338
; Note: uses the EASY scheduler
; Queues: these are actually LoadLeveler classes
; Queue:  1 DSI      
;
; Note: THIS IS A CLEANED VERSION OF THE LOG!
;       The filter used to produce it was
;         user=135 and (job>=47421 and job<=50307) (2080 jobs removed)
;
    1        0   1017  38651    1     -1    -1    1  64800    -1  1  1  1  -1  1 -1 -1 -1
`

func TestReadSWFParsesTheArchiveHeader(t *testing.T) {
	w, err := ReadSWF(strings.NewReader(ctcHeader))
	if err != nil {
		t.Fatal(err)
	}
	h := w.Header
	if h.MaxNodes != 338 || h.MaxProcs != 338 || h.UnixStartTime != 835823160 || w.MaxNodes != 338 || len(h.Problems) != 0 {
		t.Errorf("header %+v, workload MaxNodes %d", h, w.MaxNodes)
	}
	if got := h.Get("MaxNodes"); got != "338 (batch partition; 512 total)" {
		t.Errorf("MaxNodes line %q: the note should be kept", got)
	}
	if got := h.Get("Information"); got != "http://www.tc.cornell.edu/ http://www.cs.huji.ac.il/labs/parallel/workload/" {
		t.Errorf("Information %q: the continuation line should join it", got)
	}
	var notes []string
	for _, f := range h.Fields {
		if f.Label == "Note" {
			notes = append(notes, f.Value)
		}
	}
	if len(notes) != 2 || !strings.HasSuffix(notes[1], "(2080 jobs removed)") {
		t.Errorf("notes %q", notes)
	}
}

func TestSWFHeaderVariants(t *testing.T) {
	for _, tc := range []struct {
		name, header  string
		nodes, procs  int
		perNode       int
		machine       int
		from, problem string
	}{
		{"SMP nodes: MaxProcs a multiple of MaxNodes", "; MaxNodes: 1024\n; MaxProcs: 8192\n", 1024, 8192, 8, 1024, "MaxNodes", ""},
		{"only MaxProcs: one processor a node", "; MaxProcs: 430\n", 0, 430, 1, 430, "MaxProcs", ""},
		{"no header at all", "", 0, 0, 1, 0, "neither", ""},
		{"a value that is not a number is a problem, not a size", "; MaxNodes: many\n", 0, 0, 1, 0, "neither", "MaxNodes"},
		{"a number glued to text is not a number", "; MaxNodes: 12x\n; MaxProcs: 24\n", 0, 24, 1, 24, "MaxProcs", "MaxNodes"},
		{"tabs and no space after the colon", ";\tMaxNodes:64\t(some note)\n", 64, 0, 1, 64, "MaxNodes", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ReadSWF(strings.NewReader(tc.header + "1 0 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n"))
			if err != nil {
				t.Fatal(err)
			}
			h := w.Header
			n, from := h.Nodes()
			if h.MaxNodes != tc.nodes || h.MaxProcs != tc.procs || h.ProcsPerNode() != tc.perNode || n != tc.machine || w.MaxNodes != tc.machine || !strings.Contains(from, tc.from) {
				t.Errorf("header %+v: nodes %d (%s), per node %d", h, n, from, h.ProcsPerNode())
			}
			if (tc.problem == "") != (len(h.Problems) == 0) || tc.problem != "" && !strings.Contains(h.Problems[0], tc.problem) {
				t.Errorf("problems %q, want one about %q", h.Problems, tc.problem)
			}
		})
	}
}

// The shipped traces, when the workloads folder is there (it is test data
// of the repository's checkout, not of the module).
func TestTheShippedTracesHeaders(t *testing.T) {
	for _, tc := range []struct {
		file         string
		nodes, procs int
	}{
		{"CTC-SP2-1996-3.1-cln.swf.gz", 338, 338},
		{"KTH-SP2-1996-2.1-cln.swf.gz", 100, 100},
		{"SDSC-SP2-1998-4.2-cln.swf.gz", 128, 128},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("..", "..", "shared", "workloads", tc.file)
			if _, err := os.Stat(path); err != nil {
				t.Skip("no shared workloads: ", err)
			}
			w, err := ReadFile(path, "")
			if err != nil {
				t.Fatal(err)
			}
			h := w.Header
			if h.MaxNodes != tc.nodes || h.MaxProcs != tc.procs || w.MaxNodes != tc.nodes || h.ProcsPerNode() != 1 || len(h.Problems) != 0 || h.Get("Version") != "2.2" {
				t.Errorf("header: MaxNodes %d MaxProcs %d problems %q version %q", h.MaxNodes, h.MaxProcs, h.Problems, h.Get("Version"))
			}
		})
	}
}
