package sim

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Header is an SWF file's header, as the Parallel Workloads Archive's
// format page defines it (https://www.cs.huji.ac.il/labs/parallel/workload/swf.html):
// comment lines "; Label: Value" at the top of the file. Values may carry
// a note after them ("; MaxNodes: 338 (batch partition; 512 total)"), and a
// comment line without a label continues the previous one ("; Information:
// http://..." followed by ";     http://..."). Only the fields the
// simulator uses are parsed into numbers; every labelled line is kept.
type Header struct {
	// MaxNodes is the machine's nodes, MaxProcs its processors (0 =
	// absent). Version 2.1 added MaxProcs for SMP nodes: when both are
	// given and differ, a node has MaxProcs / MaxNodes processors.
	MaxNodes, MaxProcs int
	// MaxRuntime is the longest run time the machine allowed, in seconds
	// (0 = absent).
	MaxRuntime int64
	// UnixStartTime is the epoch second of the log's time 0 (0 = absent).
	UnixStartTime int64
	// Fields are the labelled lines in file order; a continued value is
	// joined to its label's with a space.
	Fields []HeaderField
	// Problems lists the header lines whose numeric value could not be
	// read (the field is then treated as absent).
	Problems []string
}

// HeaderField is one labelled header line.
type HeaderField struct {
	Label, Value string
}

// Get returns the value of the first field with the label, or "".
func (h Header) Get(label string) string {
	for _, f := range h.Fields {
		if f.Label == label {
			return f.Value
		}
	}
	return ""
}

// ProcsPerNode is the processors of one node the header implies: MaxProcs
// / MaxNodes when both are given and MaxProcs is a whole multiple of
// MaxNodes, else 1 (the SP2 logs: one processor a node).
func (h Header) ProcsPerNode() int {
	if h.MaxNodes > 0 && h.MaxProcs > h.MaxNodes && h.MaxProcs%h.MaxNodes == 0 {
		return h.MaxProcs / h.MaxNodes
	}
	return 1
}

// Nodes returns the machine's nodes by the header, and where that figure
// comes from; 0 and an explanation if the header does not say.
func (h Header) Nodes() (int, string) {
	switch {
	case h.MaxNodes > 0:
		return h.MaxNodes, "the SWF header's MaxNodes"
	case h.MaxProcs > 0:
		return h.MaxProcs, "the SWF header's MaxProcs (no MaxNodes: one processor a node)"
	}
	return 0, "the SWF header gives neither MaxNodes nor MaxProcs"
}

// line reads one comment line (without its ';'). last is the index in
// Fields of the label a continuation line extends (-1: none).
func (h *Header) line(text string, last int) int {
	label, value, ok := strings.Cut(text, ":")
	label = strings.TrimSpace(label)
	if !ok || !isLabel(label) || strings.HasPrefix(value, "//") { // a URL is no label
		// Not "Label: value": an empty comment ends a field, any other
		// line continues it.
		if t := strings.TrimSpace(text); t == "" {
			return -1
		} else if last >= 0 {
			f := &h.Fields[last]
			f.Value = strings.TrimSpace(f.Value + " " + t)
		}
		return last
	}
	value = strings.TrimSpace(value)
	h.Fields = append(h.Fields, HeaderField{Label: label, Value: value})
	num := func(dst *int64) {
		n, err := leadingInt(value)
		if err != nil {
			h.Problems = append(h.Problems, fmt.Sprintf("%s: %q: %v", label, value, err))
			return
		}
		*dst = n
	}
	var n int64
	switch label {
	case "MaxNodes":
		num(&n)
		h.MaxNodes = int(n)
	case "MaxProcs":
		num(&n)
		h.MaxProcs = int(n)
	case "MaxRuntime":
		num(&h.MaxRuntime)
	case "UnixStartTime":
		num(&h.UnixStartTime)
	}
	return len(h.Fields) - 1
}

// isLabel: one word of letters (the archive's labels are CamelCase words).
func isLabel(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !unicode.IsLetter(r) {
			return false
		}
	}
	return true
}

// leadingInt reads the positive integer a value starts with; what follows
// it, after a space, is a note ("338 (batch partition; 512 total)").
func leadingInt(v string) (int64, error) {
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	if end == 0 {
		return 0, fmt.Errorf("not a number")
	}
	if end < len(v) && !unicode.IsSpace(rune(v[end])) {
		return 0, fmt.Errorf("not a number")
	}
	n, err := strconv.ParseInt(v[:end], 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("not a positive number")
	}
	return n, nil
}
