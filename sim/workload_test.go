package sim

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

const thesisSample = `# a comment
NodeNum=4 Type=Normal TimeLimit=1:57:57 RealTime=7077 SubmitTimeStamp=3405
NodeNum=5 Type=Calibration TimeLimit=4:00:01 RealTime=14400 SubmitTimeStamp=1000

NodeNum=6 Type=Normal TimeLimit=UNLIMITED RealTime=5017 SubmitTimeStamp=11996676
`

func TestReadThesis(t *testing.T) {
	w, err := ReadThesis(strings.NewReader(thesisSample))
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: "1", Nodes: 5, TimeLimit: 14401, RunTime: 14400, Wait: -1, Submit: 1, Calibration: true},
		{ID: "0", Nodes: 4, TimeLimit: 7077, RunTime: 7077, Wait: -1, Submit: 3},
		{ID: "2", Nodes: 6, TimeLimit: cluster.Unlimited, RunTime: 5017, Wait: -1, Submit: 11996},
	}
	if len(w.Jobs) != len(want) {
		t.Fatalf("jobs %+v", w.Jobs)
	}
	for i := range want {
		if w.Jobs[i] != want[i] {
			t.Errorf("job %d = %+v, want %+v", i, w.Jobs[i], want[i])
		}
	}
}

func TestReadThesisRejectsMalformedLines(t *testing.T) {
	tests := []struct{ name, line, want string }{
		{"a missing field is an error", "NodeNum=4 Type=Normal TimeLimit=1:00:00 RealTime=5", "missing SubmitTimeStamp"},
		{"an unknown type is an error", "NodeNum=4 Type=Odd TimeLimit=1:00:00 RealTime=5 SubmitTimeStamp=0", "Normal or Calibration"},
		{"minutes over 59 are an error", "NodeNum=4 Type=Normal TimeLimit=1:60:00 RealTime=5 SubmitTimeStamp=0", "h:mm:ss"},
		{"zero nodes are an error", "NodeNum=0 Type=Normal TimeLimit=1:00:00 RealTime=5 SubmitTimeStamp=0", "positive"},
		{"a bare word is an error", "hello", "key=value"},
		{"a file without jobs is an error", "# nothing", "no jobs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadThesis(strings.NewReader(tc.line))
			if !errors.Is(err, ErrBadWorkload) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want ErrBadWorkload mentioning %q", err, tc.want)
			}
		})
	}
}

const swfSample = `; Version: 2.2
; MaxNodes: 100
;
   15   599850 192180   3477    4     -1    -1    4  53940    -1  1  12  12  -1 -1 -1 -1 -1
   16   600022  11940   2488   25     -1    -1   -1   3600    -1  1  13  13  -1 -1 -1 -1 -1
   17   600000  11940   2488   25     -1    -1   25     -1    -1  1  13  13  -1 -1 -1 -1 -1
   18   600836  32100     -1   17     -1    -1   17  36000    -1  1  15  15  -1 -1 -1 -1 -1
   19   603930   8100     29   -1     -1    -1   -1   2400    -1  1  16  16  -1 -1 -1 -1 -1
   20   605396      0     16    1     -1    -1    1     60    -1  1  17  17  -1 -1 -1
   21   605396      0     1x    1     -1    -1    1     60    -1  1  17  17  -1 -1 -1 -1 -1
`

func TestReadSWF(t *testing.T) {
	w, err := ReadSWF(strings.NewReader(swfSample))
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: "15", User: "12", Nodes: 4, TimeLimit: 53940, RunTime: 3477, Wait: 192180, Submit: 599850},
		{ID: "17", User: "13", Nodes: 25, TimeLimit: 2488, RunTime: 2488, Wait: 11940, Submit: 600000},
		{ID: "16", User: "13", Nodes: 25, TimeLimit: 3600, RunTime: 2488, Wait: 11940, Submit: 600022},
	}
	if len(w.Jobs) != len(want) {
		t.Fatalf("jobs %+v", w.Jobs)
	}
	for i := range want {
		if w.Jobs[i] != want[i] {
			t.Errorf("job %d = %+v, want %+v", i, w.Jobs[i], want[i])
		}
	}
	if w.MaxNodes != 100 {
		t.Errorf("MaxNodes %d", w.MaxNodes)
	}
	wantSkip := map[string]int{"jobs without a run time": 1, "jobs without a processor count": 1, "lines without 18 fields": 1, "lines with a non-numeric field": 1}
	for k, n := range wantSkip {
		if w.Skipped[k] != n {
			t.Errorf("skipped %q = %d, want %d (%v)", k, w.Skipped[k], n, w.Skipped)
		}
	}
	if w.Adjusted["jobs without a time limit (run time used)"] != 1 {
		t.Errorf("adjusted %v", w.Adjusted)
	}
	if s := w.Summary(); !strings.Contains(s, "3 jobs read") || !strings.Contains(s, "1 jobs without a run time") {
		t.Errorf("summary %q", s)
	}
}

func TestReadFileDetectsFormatAndGzip(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	gz.Write([]byte(swfSample))
	gz.Close()
	files := map[string][]byte{"t.swf.gz": buf.Bytes(), "t.swf": []byte(swfSample), "t.txt": []byte(thesisSample)}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := ReadFile(p, "")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(w.Jobs) != 3 {
			t.Errorf("%s: %d jobs", name, len(w.Jobs))
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "t.csv"), ""); !errors.Is(err, ErrBadWorkload) {
		t.Errorf("unknown extension: %v", err)
	}
}

func FuzzReadSWF(f *testing.F) {
	f.Add(swfSample)
	f.Add("1 0 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n")
	f.Add("1 0 0 1e300 1 -1 -1 1 NaN -1 1 1 1 -1 -1 -1 -1 -1\n")
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ReadSWF(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, j := range w.Jobs {
			if j.Nodes <= 0 || j.RunTime <= 0 || j.Submit < 0 || j.TimeLimit <= 0 {
				t.Fatalf("accepted an unrunnable job %+v", j)
			}
		}
	})
}

func FuzzReadThesis(f *testing.F) {
	f.Add(thesisSample)
	f.Add("NodeNum=1 Type=Normal TimeLimit=0:00:01 RealTime=0 SubmitTimeStamp=0")
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ReadThesis(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, j := range w.Jobs {
			if j.Nodes <= 0 || j.RunTime < 0 || j.Submit < 0 || j.TimeLimit == 0 {
				t.Fatalf("accepted an unrunnable job %+v", j)
			}
		}
	})
}
