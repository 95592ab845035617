package master

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// The oplog's rows (schema 5) are a commit's ops as they came, in a
// binary encoding written by hand: a commit appends its ops to a buffer
// and the buffer to the log, with no fold, no map and no JSON on the
// commit path (the tables are folded from the ops in memory once a
// second; the encoding is read back only by the next master after a
// kill). Strings and slices round-trip exactly, nil apart from empty.
//
//	row:  format byte (opsFormat), then ops
//	op:   kind byte, then by kind
//	  add      ref, task flag (0: nil) [task]
//	  assign   ref, worker string, batch varint
//	  requeue  ref
//	  finish   ref, result flag (0: nil) [result]
//	  delete   ref
//	  estimate job varint, n varint, mean, dev (float64 bits, 8 bytes LE)
//	  capacity state flag (0: nil) [state as JSON string]
//	ref:    task id varint, attempt varint
//	task:   id, job id varint; owner; attempt varint; name, input, output,
//	        output dir, work dir; command, env (string lists); batch size,
//	        cores, timeout varint
//	result: task id, attempt varint; status; exit code, started at,
//	        duration varint; pilot, error tail
//	string: uvarint length, bytes; string list: uvarint 0 for nil, else
//	        length+1, then the strings
//
// Fence checks write nothing.
const opsFormat = 1

// appendOps appends the ops of batches to b as one oplog row. A NaN or
// infinite estimate is refused (the tables' JSON cannot hold it), so a
// commit fails before anything is written rather than at the compaction.
func appendOps(b []byte, batches [][]core.Op) ([]byte, error) {
	b = append(b, opsFormat)
	for _, ops := range batches {
		for i := range ops {
			o := &ops[i]
			if o.Kind == core.OpFenceCheck {
				continue
			}
			b = append(b, byte(o.Kind))
			switch o.Kind {
			case core.OpAdd, core.OpAssign, core.OpRequeue, core.OpFinish, core.OpDelete:
				b = binary.AppendVarint(b, o.Ref.TaskID)
				b = binary.AppendVarint(b, int64(o.Ref.Attempt))
			}
			switch o.Kind {
			case core.OpAdd:
				if o.Task == nil {
					b = append(b, 0)
					break
				}
				b = appendTaskBin(append(b, 1), o.Task)
			case core.OpAssign:
				b = appendStr(b, o.Worker)
				b = binary.AppendVarint(b, o.Batch)
			case core.OpRequeue, core.OpDelete:
			case core.OpFinish:
				if o.Result == nil {
					b = append(b, 0)
					break
				}
				b = appendResultBin(append(b, 1), o.Result)
			case core.OpEstimate:
				for _, f := range []float64{o.Est.Mean, o.Est.Dev} {
					if math.IsNaN(f) || math.IsInf(f, 0) {
						return b, fmt.Errorf("checkpoint: estimate of job %d: %v is not a number the checkpoint stores", o.Job, f)
					}
				}
				b = binary.AppendVarint(b, o.Job)
				b = binary.AppendVarint(b, int64(o.Est.N))
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.Est.Mean))
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.Est.Dev))
			case core.OpCapacity:
				if o.Capacity == nil {
					b = append(b, 0)
					break
				}
				js, err := json.Marshal(o.Capacity)
				if err != nil {
					return b, fmt.Errorf("checkpoint: capacity state: %w", err)
				}
				b = appendStr(append(b, 1), string(js))
			default:
				return b, fmt.Errorf("checkpoint: unknown op %d", o.Kind)
			}
		}
	}
	return b, nil
}

func appendTaskBin(b []byte, t *pilotproto.Task) []byte {
	b = binary.AppendVarint(b, t.ID)
	b = binary.AppendVarint(b, t.JobID)
	b = appendStr(b, t.Owner)
	b = binary.AppendVarint(b, int64(t.Attempt))
	for _, s := range [...]string{t.Name, t.Input, t.Output, t.OutputDir, t.WorkDir} {
		b = appendStr(b, s)
	}
	b = appendStrs(b, t.Command)
	b = appendStrs(b, t.Env)
	b = binary.AppendVarint(b, int64(t.BatchSize))
	b = binary.AppendVarint(b, int64(t.Cores))
	return binary.AppendVarint(b, t.TimeoutS)
}

func appendResultBin(b []byte, r *pilotproto.Result) []byte {
	b = binary.AppendVarint(b, r.TaskID)
	b = binary.AppendVarint(b, int64(r.Attempt))
	b = appendStr(b, r.Status)
	b = binary.AppendVarint(b, int64(r.ExitCode))
	b = binary.AppendVarint(b, r.StartedAt)
	b = binary.AppendVarint(b, r.DurationMS)
	b = appendStr(b, r.Pilot)
	return appendStr(b, r.ErrorTail)
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStrs(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(ss))+1)
	for _, s := range ss {
		b = appendStr(b, s)
	}
	return b
}

// errCorrupt: an oplog row ends early or holds what appendOps never writes.
var errCorrupt = errors.New("corrupt oplog row")

// decodeOps reads back an oplog row written by appendOps.
func decodeOps(row []byte) ([]core.Op, error) {
	if len(row) == 0 {
		return nil, fmt.Errorf("%w: empty", errCorrupt)
	}
	if row[0] != opsFormat {
		return nil, fmt.Errorf("%w: format %d, this harvest writes %d", errCorrupt, row[0], opsFormat)
	}
	d := opDecoder{b: row[1:]}
	var ops []core.Op
	for len(d.b) > 0 && d.err == nil {
		o := core.Op{Kind: core.OpKind(d.b[0])}
		d.b = d.b[1:]
		switch o.Kind {
		case core.OpAdd, core.OpAssign, core.OpRequeue, core.OpFinish, core.OpDelete:
			o.Ref = pilotproto.TaskRef{TaskID: d.varint(), Attempt: int(d.varint())}
		}
		switch o.Kind {
		case core.OpAdd:
			if d.flag() {
				o.Task = d.task()
			}
		case core.OpAssign:
			o.Worker, o.Batch = d.str(), d.varint()
		case core.OpRequeue, core.OpDelete:
		case core.OpFinish:
			if d.flag() {
				o.Result = d.result()
			}
		case core.OpEstimate:
			o.Job = d.varint()
			o.Est.N = int(d.varint())
			o.Est.Mean, o.Est.Dev = d.float(), d.float()
		case core.OpCapacity:
			if d.flag() {
				o.Capacity = new(capacity.State)
				if err := json.Unmarshal([]byte(d.str()), o.Capacity); err != nil && d.err == nil {
					d.err = fmt.Errorf("%w: capacity state: %w", errCorrupt, err)
				}
			}
		default:
			return nil, fmt.Errorf("%w: op kind %d", errCorrupt, o.Kind)
		}
		ops = append(ops, o)
	}
	if d.err != nil {
		return nil, d.err
	}
	return ops, nil
}

// opDecoder reads appendOps' values; the first error sticks and the
// values after it are zero.
type opDecoder struct {
	b   []byte
	err error
}

func (d *opDecoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: it ends early", errCorrupt)
	}
	d.b = nil
}

func (d *opDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *opDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *opDecoder) flag() bool {
	if len(d.b) == 0 {
		d.fail()
		return false
	}
	f := d.b[0]
	d.b = d.b[1:]
	if f > 1 {
		d.err, d.b = fmt.Errorf("%w: flag %d", errCorrupt, f), nil
		return false
	}
	return f == 1
}

func (d *opDecoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *opDecoder) strs() []string {
	n := d.uvarint()
	if n == 0 {
		return nil
	}
	if n-1 > uint64(len(d.b)) { // every string takes a byte at least
		d.fail()
		return nil
	}
	ss := make([]string, n-1)
	for i := range ss {
		ss[i] = d.str()
	}
	return ss
}

func (d *opDecoder) float() float64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return f
}

func (d *opDecoder) task() *pilotproto.Task {
	t := &pilotproto.Task{ID: d.varint(), JobID: d.varint(), Owner: d.str(), Attempt: int(d.varint())}
	t.Name, t.Input, t.Output, t.OutputDir, t.WorkDir = d.str(), d.str(), d.str(), d.str(), d.str()
	t.Command, t.Env = d.strs(), d.strs()
	t.BatchSize, t.Cores, t.TimeoutS = int(d.varint()), int(d.varint()), d.varint()
	return t
}

func (d *opDecoder) result() *pilotproto.Result {
	r := &pilotproto.Result{TaskID: d.varint(), Attempt: int(d.varint()), Status: d.str()}
	r.ExitCode, r.StartedAt, r.DurationMS = int(d.varint()), d.varint(), d.varint()
	r.Pilot, r.ErrorTail = d.str(), d.str()
	return r
}
