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
//	string: uvarint prefix, uvarint length, bytes: the string is the first
//	        prefix bytes of the row's previous string of the same field
//	        (slot) followed by those bytes (front coding: the tasks of a
//	        row share most of their paths, ids and statuses; end to end a
//	        task's log bytes went from 361 to 125). Format 1 had no prefix.
//	list:   uvarint 0 for nil, else length+1, then the strings (element i
//	        in the field's slot i, the last slot for the rest)
//
// Fence checks write nothing.
const opsFormat = 2

// The string fields' slots: each field is front-coded against its own
// previous value in the row.
const (
	slotWorker = iota
	slotOwner
	slotName
	slotInput
	slotOutput
	slotOutputDir
	slotWorkDir
	slotStatus
	slotPilot
	slotErrorTail
	slotCapacity
	slotCommand                   // slotCommand+i: element i of a command
	slotEnv     = slotCommand + 4 // slotEnv+i: element i of an env
	nSlots      = slotEnv + 2
)

// appendOps appends the ops of batches to b as one oplog row. A NaN or
// infinite estimate is refused (the tables' JSON cannot hold it), so a
// commit fails before anything is written rather than at the compaction.
func appendOps(b []byte, batches [][]core.Op) ([]byte, error) {
	e := opEncoder{b: append(b, opsFormat)}
	err := e.ops(batches)
	return e.b, err
}

// opEncoder writes one oplog row; prev are the row's last strings by slot.
type opEncoder struct {
	b    []byte
	prev [nSlots]string
}

func (e *opEncoder) ops(batches [][]core.Op) error {
	for _, ops := range batches {
		for i := range ops {
			o := &ops[i]
			if o.Kind == core.OpFenceCheck {
				continue
			}
			e.b = append(e.b, byte(o.Kind))
			switch o.Kind {
			case core.OpAdd, core.OpAssign, core.OpRequeue, core.OpFinish, core.OpDelete:
				e.b = binary.AppendVarint(e.b, o.Ref.TaskID)
				e.b = binary.AppendVarint(e.b, int64(o.Ref.Attempt))
			}
			switch o.Kind {
			case core.OpAdd:
				if o.Task == nil {
					e.b = append(e.b, 0)
					break
				}
				e.b = append(e.b, 1)
				e.task(o.Task)
			case core.OpAssign:
				e.str(slotWorker, o.Worker)
				e.b = binary.AppendVarint(e.b, o.Batch)
			case core.OpRequeue, core.OpDelete:
			case core.OpFinish:
				if o.Result == nil {
					e.b = append(e.b, 0)
					break
				}
				e.b = append(e.b, 1)
				e.result(o.Result)
			case core.OpEstimate:
				for _, f := range []float64{o.Est.Mean, o.Est.Dev} {
					if math.IsNaN(f) || math.IsInf(f, 0) {
						return fmt.Errorf("checkpoint: estimate of job %d: %v is not a number the checkpoint stores", o.Job, f)
					}
				}
				e.b = binary.AppendVarint(e.b, o.Job)
				e.b = binary.AppendVarint(e.b, int64(o.Est.N))
				e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(o.Est.Mean))
				e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(o.Est.Dev))
			case core.OpCapacity:
				if o.Capacity == nil {
					e.b = append(e.b, 0)
					break
				}
				js, err := json.Marshal(o.Capacity)
				if err != nil {
					return fmt.Errorf("checkpoint: capacity state: %w", err)
				}
				e.b = append(e.b, 1)
				e.str(slotCapacity, string(js))
			default:
				return fmt.Errorf("checkpoint: unknown op %d", o.Kind)
			}
		}
	}
	return nil
}

func (e *opEncoder) task(t *pilotproto.Task) {
	e.b = binary.AppendVarint(e.b, t.ID)
	e.b = binary.AppendVarint(e.b, t.JobID)
	e.str(slotOwner, t.Owner)
	e.b = binary.AppendVarint(e.b, int64(t.Attempt))
	e.str(slotName, t.Name)
	e.str(slotInput, t.Input)
	e.str(slotOutput, t.Output)
	e.str(slotOutputDir, t.OutputDir)
	e.str(slotWorkDir, t.WorkDir)
	e.strs(slotCommand, slotEnv-slotCommand, t.Command)
	e.strs(slotEnv, nSlots-slotEnv, t.Env)
	e.b = binary.AppendVarint(e.b, int64(t.BatchSize))
	e.b = binary.AppendVarint(e.b, int64(t.Cores))
	e.b = binary.AppendVarint(e.b, t.TimeoutS)
}

func (e *opEncoder) result(r *pilotproto.Result) {
	e.b = binary.AppendVarint(e.b, r.TaskID)
	e.b = binary.AppendVarint(e.b, int64(r.Attempt))
	e.str(slotStatus, r.Status)
	e.b = binary.AppendVarint(e.b, int64(r.ExitCode))
	e.b = binary.AppendVarint(e.b, r.StartedAt)
	e.b = binary.AppendVarint(e.b, r.DurationMS)
	e.str(slotPilot, r.Pilot)
	e.str(slotErrorTail, r.ErrorTail)
}

// str appends s front-coded against the slot's previous string.
func (e *opEncoder) str(slot int, s string) {
	p := e.prev[slot]
	n := 0
	for n < len(p) && n < len(s) && p[n] == s[n] {
		n++
	}
	e.b = binary.AppendUvarint(e.b, uint64(n))
	e.b = binary.AppendUvarint(e.b, uint64(len(s)-n))
	e.b = append(e.b, s[n:]...)
	e.prev[slot] = s
}

// strs appends a list, element i in slot first+i (the last of its n
// slots for the rest).
func (e *opEncoder) strs(first, n int, ss []string) {
	if ss == nil {
		e.b = append(e.b, 0)
		return
	}
	e.b = binary.AppendUvarint(e.b, uint64(len(ss))+1)
	for i, s := range ss {
		e.str(first+min(i, n-1), s)
	}
}

// errCorrupt: an oplog row ends early or holds what appendOps never writes.
var errCorrupt = errors.New("corrupt oplog row")

// decodeOps reads back an oplog row written by appendOps.
func decodeOps(row []byte) ([]core.Op, error) {
	if len(row) == 0 {
		return nil, fmt.Errorf("%w: empty", errCorrupt)
	}
	if row[0] != 1 && row[0] != opsFormat {
		return nil, fmt.Errorf("%w: format %d, this harvest writes %d", errCorrupt, row[0], opsFormat)
	}
	d := opDecoder{b: row[1:], front: row[0] >= 2}
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
			o.Worker, o.Batch = d.str(slotWorker), d.varint()
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
				if err := json.Unmarshal([]byte(d.str(slotCapacity)), o.Capacity); err != nil && d.err == nil {
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
// values after it are zero. front: the strings are front-coded (format 2).
type opDecoder struct {
	b     []byte
	err   error
	front bool
	prev  [nSlots]string
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

func (d *opDecoder) str(slot int) string {
	var shared uint64
	if d.front {
		shared = d.uvarint()
	}
	n := d.uvarint()
	p := d.prev[slot]
	if d.err != nil || shared > uint64(len(p)) || n > uint64(len(d.b)) {
		if d.err == nil && shared > uint64(len(p)) {
			d.err = fmt.Errorf("%w: a prefix of %d bytes of a %d-byte string", errCorrupt, shared, len(p))
		}
		d.fail()
		return ""
	}
	s := p[:shared] + string(d.b[:n])
	d.b = d.b[n:]
	d.prev[slot] = s
	return s
}

// strs reads a list written by opEncoder.strs.
func (d *opDecoder) strs(first, slots int) []string {
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
		ss[i] = d.str(first + min(i, slots-1))
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
	t := &pilotproto.Task{ID: d.varint(), JobID: d.varint(), Owner: d.str(slotOwner), Attempt: int(d.varint())}
	t.Name, t.Input, t.Output = d.str(slotName), d.str(slotInput), d.str(slotOutput)
	t.OutputDir, t.WorkDir = d.str(slotOutputDir), d.str(slotWorkDir)
	t.Command, t.Env = d.strs(slotCommand, slotEnv-slotCommand), d.strs(slotEnv, nSlots-slotEnv)
	t.BatchSize, t.Cores, t.TimeoutS = int(d.varint()), int(d.varint()), d.varint()
	return t
}

func (d *opDecoder) result() *pilotproto.Result {
	r := &pilotproto.Result{TaskID: d.varint(), Attempt: int(d.varint()), Status: d.str(slotStatus)}
	r.ExitCode, r.StartedAt, r.DurationMS = int(d.varint()), d.varint(), d.varint()
	r.Pilot, r.ErrorTail = d.str(slotPilot), d.str(slotErrorTail)
	return r
}
