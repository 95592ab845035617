package policy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

var update = flag.Bool("update", false, "rewrite the expected decisions of testdata/scenarios/*.txt")

// scenario is one file of testdata/scenarios: header lines, a snapshot,
// "----", the expected decision. Header lines are "# comments" and the
// optional directives
//
//	config: {JSON overlay on DefaultConfig, e.g. {"margin_s": 60}}
//	upcoming: [JSON ledger entries]
//	recommended: N
type scenario struct {
	header   string
	input    Input
	config   Config
	snapshot string // as written, kept on update
	want     string
}

const separator = "\n----\n"

func parseScenario(b []byte) (scenario, error) {
	sc := scenario{config: DefaultConfig()}
	text := string(b)
	before, after, ok := strings.Cut(text, separator)
	if !ok {
		return sc, fmt.Errorf("no %q separator line", strings.TrimSpace(separator))
	}
	sc.want = strings.TrimSpace(after)
	lines := strings.SplitAfter(before, "\n")
	i := 0
	for ; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		key, val, _ := strings.Cut(line, ":")
		var err error
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case key == "config":
			err = json.Unmarshal([]byte(val), &sc.config)
		case key == "upcoming":
			err = json.Unmarshal([]byte(val), &sc.input.Upcoming)
		case key == "recommended":
			sc.input.Recommended, err = strconv.Atoi(strings.TrimSpace(val))
		default:
			goto body
		}
		if err != nil {
			return sc, fmt.Errorf("header %q: %w", line, err)
		}
		sc.header += lines[i]
	}
body:
	sc.snapshot = strings.Join(lines[i:], "")
	dec := json.NewDecoder(strings.NewReader(sc.snapshot))
	dec.DisallowUnknownFields()
	var s cluster.Snapshot
	if err := dec.Decode(&s); err != nil {
		return sc, fmt.Errorf("snapshot: %w", err)
	}
	sc.input.Snapshot = s
	return sc, nil
}

// TestScenarios replays every scenario file; go test -run TestScenarios
// -update rewrites the expected decisions (review the diff before committing).
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			sc, err := parseScenario(b)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if err := sc.input.Snapshot.Validate(); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			got, err := json.MarshalIndent(Decide(sc.input, sc.config), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				var out bytes.Buffer
				out.WriteString(sc.header)
				out.WriteString(strings.TrimRight(sc.snapshot, "\n"))
				out.WriteString(separator)
				out.Write(got)
				out.WriteString("\n")
				if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if string(got) != sc.want {
				t.Errorf("%s: decision differs (run with -update to accept)\ngot:\n%s\nwant:\n%s", file, got, sc.want)
			}
		})
	}
}
