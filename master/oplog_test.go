package master

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// randomString mixes the usual (plain ASCII ids and paths) with what
// needs care: escapes, HTML's <>&, non-ASCII, invalid UTF-8, NUL.
func randomString(r *rand.Rand) string {
	switch r.IntN(4) {
	case 0:
		return ""
	case 1:
		return "/data/job-42/entry_" + string(rune('a'+r.IntN(26)))
	}
	alphabet := []string{"a", "Z", "0", "/", " ", "\"", "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "<", ">", "&", "é", "😀", "\u2028", "\xff", "\xc3", "{input}"}
	var b []byte
	for range r.IntN(12) {
		b = append(b, alphabet[r.IntN(len(alphabet))]...)
	}
	return string(b)
}

func randomInt(r *rand.Rand) int64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return []int64{math.MinInt64, math.MaxInt64, -1, 1 << 40}[r.IntN(4)]
	}
	return r.Int64N(1_000_000) - 1000
}

// fillRandom sets every field of the struct v points to, by reflection, so
// that a field added to pilotproto's types and not to the hand-written
// encodings fails the tests; a field of a kind it does not know fails too.
func fillRandom(t *testing.T, r *rand.Rand, v any) {
	t.Helper()
	s := reflect.ValueOf(v).Elem()
	for i := range s.NumField() {
		f := s.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(randomInt(r))
		case reflect.String:
			f.SetString(randomString(r))
		case reflect.Slice:
			if f.Type().Elem().Kind() != reflect.String {
				t.Fatalf("field %s of %T: a slice of %s, which the test does not fill", s.Type().Field(i).Name, v, f.Type().Elem())
			}
			switch r.IntN(3) {
			case 0: // nil
			case 1:
				f.Set(reflect.ValueOf([]string{}))
			default:
				ss := make([]string, 1+r.IntN(4))
				for j := range ss {
					ss[j] = randomString(r)
				}
				f.Set(reflect.ValueOf(ss))
			}
		default:
			t.Fatalf("field %s of %T: kind %s, which the test does not fill", s.Type().Field(i).Name, v, f.Kind())
		}
	}
}

func randomTask(t *testing.T, r *rand.Rand) *pilotproto.Task {
	var task pilotproto.Task
	fillRandom(t, r, &task)
	return &task
}

func randomResult(t *testing.T, r *rand.Rand) *pilotproto.Result {
	var res pilotproto.Result
	fillRandom(t, r, &res)
	return &res
}

// The compaction's hand-written JSON of a task and of a result is byte
// for byte what encoding/json writes (what the tasks table held before,
// what Load reads), over random values in every field.
func TestRowJSONIsWhatEncodingJSONWrites(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 17))
	for i := range 3000 {
		task := randomTask(t, r)
		want, err := json.Marshal(task)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendTaskJSON([]byte("prefix"), task); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("case %d: task %+v\nhand-written %s\nencoding/json %s", i, task, got[6:], want)
		}
		res := randomResult(t, r)
		if want, err = json.Marshal(res); err != nil {
			t.Fatal(err)
		}
		if got := appendResultJSON(nil, res); !bytes.Equal(got, want) {
			t.Fatalf("case %d: result %+v\nhand-written %s\nencoding/json %s", i, res, got, want)
		}
	}
}

func randomLogOps(t *testing.T, r *rand.Rand, n int) []core.Op {
	ops := make([]core.Op, n)
	for i := range ops {
		ref := pilotproto.TaskRef{TaskID: randomInt(r), Attempt: int(randomInt(r))}
		switch k := core.OpKind(r.IntN(8)); k {
		case core.OpAdd:
			ops[i] = core.Op{Kind: k, Ref: ref, Task: randomTask(t, r)}
			if r.IntN(10) == 0 {
				ops[i].Task = nil
			}
		case core.OpAssign:
			ops[i] = core.Op{Kind: k, Ref: ref, Worker: randomString(r), Batch: randomInt(r)}
		case core.OpRequeue, core.OpDelete:
			ops[i] = core.Op{Kind: k, Ref: ref}
		case core.OpFinish:
			ops[i] = core.Op{Kind: k, Ref: ref, Result: randomResult(t, r)}
			if r.IntN(10) == 0 {
				ops[i].Result = nil
			}
		case core.OpEstimate:
			ops[i] = core.Op{Kind: k, Job: randomInt(r), Est: core.Estimator{N: int(randomInt(r)), Mean: r.NormFloat64() * 1e3, Dev: r.ExpFloat64()}}
		case core.OpFenceCheck:
			ops[i] = core.Op{Kind: k}
		case core.OpCapacity:
			ops[i] = core.Op{Kind: k}
			if r.IntN(10) > 0 {
				ops[i].Capacity = &capacity.State{Phase: capacity.Grow, Good: r.IntN(64), Bad: r.IntN(64), HoldLeft: r.IntN(3),
					Baseline: map[int64]float64{randomInt(r): r.Float64() * 100}, Acc: []capacity.Acc{{Job: randomInt(r), Size: r.IntN(8), N: r.IntN(9), Seconds: r.Float64()}}}
			}
		default:
			t.Fatalf("op kind %d: the test does not know it", k)
		}
	}
	return ops
}

// An oplog row reads back as the ops that were committed, fence checks
// left out, over random ops with random values in every field, in one or
// several slices; every row cut short is refused or reads back as fewer
// whole ops, never as ops that were not committed.
func TestOplogRowsReadBackAsTheirOps(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 23))
	for c := range 500 {
		ops := randomLogOps(t, r, r.IntN(30))
		h := r.IntN(len(ops) + 1)
		row, err := appendOps([]byte("old row"), [][]core.Op{ops[:h], ops[h:]})
		if err != nil {
			t.Fatalf("case %d: %v", c, err)
		}
		row = row[len("old row"):]
		var want []core.Op
		for _, o := range ops {
			if o.Kind != core.OpFenceCheck {
				want = append(want, o)
			}
		}
		got, err := decodeOps(row)
		if err != nil {
			t.Fatalf("case %d: %v", c, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d:\nread back %+v\ncommitted %+v", c, got, want)
		}
		for cut := range len(row) {
			if c >= 50 && r.IntN(20) > 0 {
				continue // every cut of the first rows, a few of the others'
			}
			got, err := decodeOps(row[:cut])
			if err != nil {
				if !errors.Is(err, errCorrupt) {
					t.Fatalf("case %d, row cut at %d: %v is not errCorrupt", c, cut, err)
				}
				continue
			}
			if len(got) >= len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want[:len(got)])) {
				t.Fatalf("case %d, row cut at %d of %d: read back %+v", c, cut, len(row), got)
			}
		}
	}
}

// A NaN or infinite estimate is refused at the commit, which writes
// nothing (it would otherwise fail every compaction after it), and the
// checkpoint goes on.
func TestACommitOfANaNEstimateIsRefusedAndWritesNothing(t *testing.T) {
	cp, err := OpenCheckpoint(filepath.Join(t.TempDir(), "cp.db"), "WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if err := cp.Claim(1); err != nil {
		t.Fatal(err)
	}
	add := core.Op{Kind: core.OpAdd, Ref: pilotproto.TaskRef{TaskID: 1, Attempt: 1}, Task: &pilotproto.Task{ID: 1, Attempt: 1}}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if err := cp.Commit([]core.Op{add, {Kind: core.OpEstimate, Job: 3, Est: core.Estimator{N: 1, Mean: 2, Dev: bad}}}); err == nil {
			t.Fatalf("an estimate with dev %v was committed", bad)
		}
		if n, err := cp.LogRows(); n != 0 || err != nil {
			t.Fatalf("the refused commit left %d log rows (%v)", n, err)
		}
	}
	if err := cp.Commit([]core.Op{add}); err != nil {
		t.Fatal(err)
	}
	if err := cp.compact(); err != nil {
		t.Fatalf("compaction after the refused commits: %v", err)
	}
	rows, est, err := cp.Load()
	if err != nil || len(rows) != 1 || len(est) != 0 {
		t.Fatalf("after the refused commits and one add: %+v %v %v", rows, est, err)
	}
}

// fixtureOps are one of each op with every field set.
func fixtureOps() []core.Op {
	r := pilotproto.TaskRef{TaskID: 7, Attempt: 2}
	return []core.Op{
		{Kind: core.OpAdd, Ref: r, Task: &pilotproto.Task{ID: 7, JobID: 3, Owner: "alice", Attempt: 2, Name: "e7", Input: "/data/in/e7",
			Output: "/data/out/e7.out", OutputDir: "/data/out", Command: []string{"/bin/x", "{input}"}, Env: []string{"A=é"}, BatchSize: 10, Cores: 1, TimeoutS: 60}},
		{Kind: core.OpAssign, Ref: r, Worker: "worker-1", Batch: 5},
		{Kind: core.OpRequeue, Ref: r},
		{Kind: core.OpFinish, Ref: r, Result: &pilotproto.Result{TaskID: 7, Attempt: 2, Status: "failed", ExitCode: -1, StartedAt: 1_790_000_000_000, DurationMS: 12, Pilot: "p1", ErrorTail: "boom\n"}},
		{Kind: core.OpEstimate, Job: 3, Est: core.Estimator{N: 4, Mean: 0.25, Dev: 1e-3}},
		{Kind: core.OpCapacity, Capacity: &capacity.State{Phase: capacity.Grow, Good: 2, Bad: 5, Baseline: map[int64]float64{3: 0.5}, Acc: []capacity.Acc{{Job: 3, Size: 2, N: 1, Seconds: 0.3}}}},
		{Kind: core.OpDelete, Ref: r},
	}
}

// format1Row is fixtureOps as the first oplog format (no front coding)
// wrote them (appendOps of commit 8b70cb8): a checkpoint a master of that
// harvest left is still read.
const format1Row = "01000e04010e0605616c696365040265370b2f646174612f696e2f6537102f646174612f6f75742f65372e6f7574092f646174612f6f75740003062f62696e2f78077b696e7075747d0204413dc3a9140278010e0408776f726b65722d310a020e04030e04010e04066661696c65640180b083c598681802703105626f6f6d0a050608000000000000d03ffca9f1d24d62503f0701657b227068617365223a2267726f77222c22676f6f64223a322c22626164223a352c22626173656c696e65223a7b2233223a302e357d2c22616363223a5b7b226a6f62223a332c2273697a65223a322c226e223a312c227365636f6e6473223a302e337d5d7d040e04"

func TestAFormat1OplogRowIsStillRead(t *testing.T) {
	row, err := hex.DecodeString(format1Row)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeOps(row)
	if err != nil {
		t.Fatal(err)
	}
	if want := fixtureOps(); !reflect.DeepEqual(got, want) {
		t.Fatalf("format 1 row read as\n%+v\nwant\n%+v", got, want)
	}
	// The same ops in this harvest's format: front-coded, read back the same.
	row2, err := appendOps(nil, [][]core.Op{fixtureOps()})
	if err != nil {
		t.Fatal(err)
	}
	if row2[0] != opsFormat || opsFormat == 1 {
		t.Fatalf("format byte %d", row2[0])
	}
	if got, err := decodeOps(row2); err != nil || !reflect.DeepEqual(got, fixtureOps()) {
		t.Fatalf("format %d: %+v %v", opsFormat, got, err)
	}
}
