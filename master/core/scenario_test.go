package core_test

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/workerproto"
)

var update = flag.Bool("update", false, "rewrite the expected effects of testdata/*.txt")

// TestScenarios replays testdata/*.txt against the core. A file is a list
// of blocks, etcd-datadriven style:
//
//	# comments
//	command arg key=value ...
//	input lines (rows, tasks), if the command takes any
//	----
//	the expected effects, one per line, ended by a blank line
//
// `go test ./master/core -run TestScenarios -update` rewrites the expected
// effects; review the diff before committing it. The commands are listed
// in (*scenario).do.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := parseBlocks(string(b))
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			s := newScenario()
			var out strings.Builder
			for _, bl := range blocks {
				got, err := s.do(bl)
				if err != nil {
					t.Fatalf("%s:%d: %s: %v", f, bl.line, bl.cmd, err)
				}
				got = strings.TrimRight(got, "\n")
				if !*update && got != bl.want {
					t.Errorf("%s:%d: %s\n--- got\n%s\n--- want\n%s", f, bl.line, bl.cmd, got, bl.want)
				}
				out.WriteString(bl.text)
				out.WriteString("----\n")
				if got != "" {
					out.WriteString(got + "\n")
				}
				out.WriteString("\n")
			}
			if *update {
				if err := os.WriteFile(f, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

type block struct {
	line  int
	text  string // comments, command and input as written
	cmd   string
	args  []string
	input []string
	want  string
}

func parseBlocks(s string) ([]block, error) {
	lines := strings.Split(s, "\n")
	var out []block
	for i := 0; i < len(lines); {
		var b block
		for ; i < len(lines) && lines[i] != "----"; i++ {
			l := lines[i]
			if b.cmd == "" && strings.TrimSpace(l) == "" {
				continue
			}
			b.text += l + "\n"
			switch {
			case strings.HasPrefix(l, "#"):
			case b.cmd == "":
				f := strings.Fields(l)
				b.cmd, b.args, b.line = f[0], f[1:], i+1
			case strings.TrimSpace(l) != "":
				b.input = append(b.input, strings.TrimSpace(l))
			}
		}
		if b.cmd == "" {
			if strings.TrimSpace(b.text) != "" {
				return nil, fmt.Errorf("trailing text without a command: %q", b.text)
			}
			break
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: %s: no ---- line", b.line, b.cmd)
		}
		i++ // ----
		var want []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		b.want = strings.Join(want, "\n")
		out = append(out, b)
	}
	return out, nil
}

// t0 is the scenarios' time zero; times are printed relative to it.
var t0 = time.Unix(1_800_000_000, 0)

type scenario struct {
	cfg  core.Config
	c    *core.Core
	now  time.Time
	next core.ReqID
}

func newScenario() *scenario {
	return &scenario{now: t0, cfg: core.Config{
		PilotID: "p1", Address: "http://p1:1", Epoch: 1,
		PullWait: 20 * time.Second, Prefetch: 2, MinBuffer: 64, MaxBuffer: 20000, MaxPull: 2000,
		IdlePoll: time.Second, RetryInterval: time.Second, HeartbeatInterval: 10 * time.Second,
		LeaseRenewInterval: 10 * time.Second, LeaseTTL: 30 * time.Second, WorkerTimeout: 60 * time.Second,
		ReconnectGrace: 30 * time.Second, SafetyMargin: 60 * time.Second, ReportBatch: 1000,
		Recommend: policy.DefaultRecommendConfig(),
	}}
}

// do runs one command:
//
//	config key=value...      core settings (before new): epoch pilot pull-wait prefetch min-buffer
//	                         max-buffer max-pull idle-poll retry heartbeat lease-renew lease-ttl
//	                         worker-timeout reconnect-grace safety-margin report-batch report-delay
//	                         refill-percent hand-back-wait, and the
//	                         capacity rule: capacity-factor capacity-samples capacity-hold capacity-initial
//	new                      a core restored from the rows below (pending|assigned|final REF job=J
//	                         [batch-size=N] [worker=W batch=B [address=URL]] [status=S]; estimate job=J n=N
//	                         mean=S dev=S), then the driver's first Tick; prints the workers to probe
//	                         (Restored)
//	advance D                the clock moves on (no event)
//	tick [D]                 the clock moves on by D, then Tick
//	register W slots=N [capacity=N] [pilot=P] [address=URL] [deadline=+D] [held=REFS] [finished=REFS]
//	pull W [free=N] [wait=D]
//	results W REF:STATUS[:DURATION] ... [leaving]
//	heartbeat W [held=REFS] [partial]
//	gone #N                  request N's worker hung up
//	pilot-gone W             nothing listens at W's pilot address (the driver's probe)
//	pulled [cancelled=JOBS] [err=E]   the queue's answer to the pull; tasks below:
//	                         job=J tasks=A-B [batch-size=N] [attempt=N] [timeout=D]
//	reported [err=E]         the queue's answer to the report
//	beaten [cancelled=JOBS] [ends=P:+D,...] [err=E] [rec-err=E]   ends: pilots' ends pulled in
//	leased [holder=P epoch=N] [ttl=D] [err=E]   (default: granted to us, with lease-ttl)
//	stop                     graceful stop
//	commit-failed            the last ops could not be stored (a newer master claimed the checkpoint)
//	stats
//
// E is stale (a newer epoch), expired (the lease expired) or down (the
// queue did not answer). REF is TASK/ATTEMPT; REFS are comma-separated.
func (s *scenario) do(b block) (string, error) {
	kv, pos := keyValues(b.args)
	var ev core.Event
	switch b.cmd {
	case "config":
		return "", s.configure(kv)
	case "new":
		rows, est, err := parseRows(b.input)
		if err != nil {
			return "", err
		}
		s.c = core.New(s.cfg, rows, est, s.now)
		ev = core.Tick{}
		if probe := s.c.Restored(); len(probe) > 0 {
			ids := make([]string, 0, len(probe))
			for id, addr := range probe {
				ids = append(ids, id+" at "+addr)
			}
			slices.Sort(ids)
			s.c.Step(s.now, ev)
			return "probe " + strings.Join(ids, ", ") + "\n" + s.format(s.c.Ready()), nil
		}
	case "advance":
		d, err := duration(pos, 0)
		if err != nil {
			return "", err
		}
		s.now = s.now.Add(d)
		return "", nil
	case "tick":
		if len(pos) > 0 {
			d, err := duration(pos, 0)
			if err != nil {
				return "", err
			}
			s.now = s.now.Add(d)
		}
		ev = core.Tick{}
	case "stats":
		st := s.c.Stats()
		return fmt.Sprintf("pending %d, assigned %d, unreported %d, workers %d, reported %d",
			st.Pending, st.Assigned, st.Unreported, st.Workers, st.Reported), nil
	default:
		var err error
		if ev, err = s.event(b, kv, pos); err != nil {
			return "", err
		}
	}
	if s.c == nil {
		return "", errors.New("no core yet: run new first")
	}
	s.c.Step(s.now, ev)
	return s.format(s.c.Ready()), nil
}

func (s *scenario) configure(kv map[string]string) error {
	durs := map[string]*time.Duration{
		"pull-wait": &s.cfg.PullWait, "idle-poll": &s.cfg.IdlePoll, "retry": &s.cfg.RetryInterval,
		"heartbeat": &s.cfg.HeartbeatInterval, "lease-renew": &s.cfg.LeaseRenewInterval, "lease-ttl": &s.cfg.LeaseTTL,
		"worker-timeout": &s.cfg.WorkerTimeout, "reconnect-grace": &s.cfg.ReconnectGrace, "safety-margin": &s.cfg.SafetyMargin,
		"hand-back-wait": &s.cfg.HandBackWait, "report-delay": &s.cfg.ReportDelay,
	}
	ints := map[string]*int{
		"prefetch": &s.cfg.Prefetch, "min-buffer": &s.cfg.MinBuffer, "max-buffer": &s.cfg.MaxBuffer,
		"max-pull": &s.cfg.MaxPull, "report-batch": &s.cfg.ReportBatch,
		"refill-percent": &s.cfg.RefillPercent,
	}
	for k, v := range kv {
		var err error
		switch {
		case durs[k] != nil:
			*durs[k], err = time.ParseDuration(v)
		case ints[k] != nil:
			*ints[k], err = strconv.Atoi(v)
		case k == "epoch":
			s.cfg.Epoch, err = strconv.ParseInt(v, 10, 64)
		case k == "pilot":
			s.cfg.PilotID = v
		case strings.HasPrefix(k, "capacity-"):
			err = s.configureCapacity(strings.TrimPrefix(k, "capacity-"), v)
		default:
			err = fmt.Errorf("unknown setting %q", k)
		}
		if err != nil {
			return fmt.Errorf("config %s: %w", k, err)
		}
	}
	return nil
}

// configureCapacity turns the capacity rule on (its defaults) and sets
// one of its settings: factor, samples, hold, initial.
func (s *scenario) configureCapacity(k, v string) error {
	if s.cfg.Capacity == nil {
		d := capacity.DefaultConfig()
		s.cfg.Capacity = &d
	}
	var err error
	switch k {
	case "factor":
		s.cfg.Capacity.Factor, err = strconv.ParseFloat(v, 64)
	case "samples":
		s.cfg.Capacity.MinSamples, err = strconv.Atoi(v)
	case "hold":
		s.cfg.Capacity.HoldRounds, err = strconv.Atoi(v)
	case "initial":
		s.cfg.Capacity.InitialSize, err = strconv.Atoi(v)
	default:
		err = fmt.Errorf("unknown capacity setting %q", k)
	}
	return err
}

func (s *scenario) event(b block, kv map[string]string, pos []string) (core.Event, error) {
	req := func() core.ReqID { s.next++; return s.next }
	worker := ""
	if len(pos) > 0 {
		worker = pos[0]
	}
	switch b.cmd {
	case "register":
		r := workerproto.RegisterRequest{WorkerID: worker, PilotID: kv["pilot"], Address: kv["address"]}
		var err error
		if r.Slots, err = strconv.Atoi(kv["slots"]); err != nil {
			return nil, fmt.Errorf("slots: %w", err)
		}
		r.Capacity = 2 * r.Slots
		if v, ok := kv["capacity"]; ok {
			if r.Capacity, err = strconv.Atoi(v); err != nil {
				return nil, err
			}
		}
		if v, ok := kv["deadline"]; ok {
			d, err := time.ParseDuration(strings.TrimPrefix(v, "+"))
			if err != nil {
				return nil, err
			}
			r.Deadline = s.now.Add(d).UnixMilli()
		}
		if r.Held, err = refs(kv["held"]); err != nil {
			return nil, err
		}
		if r.Finished, err = refs(kv["finished"]); err != nil {
			return nil, err
		}
		return core.Register{Req: req(), RegisterRequest: r}, nil
	case "pull":
		r := workerproto.PullRequest{WorkerID: worker, Free: 1}
		if v, ok := kv["free"]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, err
			}
			r.Free = n
		}
		if v, ok := kv["wait"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, err
			}
			r.WaitMS = d.Milliseconds()
		}
		return core.Pull{Req: req(), PullRequest: r}, nil
	case "results":
		r := workerproto.ResultsRequest{WorkerID: worker}
		for _, f := range pos[1:] {
			if f == "leaving" {
				r.Leaving = true
				continue
			}
			parts := strings.Split(f, ":")
			k, err := parseRef(parts[0])
			if err != nil || len(parts) < 2 {
				return nil, fmt.Errorf("result %q: want REF:STATUS[:DURATION]", f)
			}
			res := pilotproto.Result{TaskID: k.TaskID, Attempt: k.Attempt, Status: parts[1], StartedAt: s.now.UnixMilli()}
			if len(parts) > 2 {
				d, err := time.ParseDuration(parts[2])
				if err != nil {
					return nil, err
				}
				res.DurationMS = d.Milliseconds()
			}
			r.Results = append(r.Results, res)
		}
		return core.Results{Req: req(), ResultsRequest: r}, nil
	case "heartbeat":
		held, err := refs(kv["held"])
		if err != nil {
			return nil, err
		}
		return core.Heartbeat{Req: req(), HeartbeatRequest: workerproto.HeartbeatRequest{
			WorkerID: worker, Held: held, Complete: !slices.Contains(pos, "partial")}}, nil
	case "gone":
		n, err := strconv.Atoi(strings.TrimPrefix(worker, "#"))
		if err != nil {
			return nil, fmt.Errorf("gone #N: %w", err)
		}
		return core.Gone{Req: core.ReqID(n)}, nil
	case "pilot-gone":
		return core.PilotGone{Worker: worker}, nil
	case "pulled":
		if err := queueErr(kv["err"]); err != nil {
			return core.Pulled{Err: err}, nil
		}
		var resp pilotproto.PullResponse
		var err error
		if resp.Tasks, err = parseTasks(b.input); err != nil {
			return nil, err
		}
		if resp.CancelledJobs, err = ints64(kv["cancelled"]); err != nil {
			return nil, err
		}
		return core.Pulled{Resp: resp}, nil
	case "reported":
		return core.Reported{Err: queueErr(kv["err"])}, nil
	case "beaten":
		jobs, err := ints64(kv["cancelled"])
		if err != nil {
			return nil, err
		}
		resp := pilotproto.HeartbeatResponse{CancelledJobs: jobs}
		if v, ok := kv["ends"]; ok {
			resp.Deadlines = map[string]int64{}
			for _, pe := range strings.Split(v, ",") {
				p, e, ok := strings.Cut(pe, ":")
				d, err := time.ParseDuration(strings.TrimPrefix(e, "+"))
				if !ok || err != nil {
					return nil, fmt.Errorf("ends %q: want PILOT:+DURATION", pe)
				}
				resp.Deadlines[p] = s.now.Add(d).Unix()
			}
		}
		return core.Beaten{Resp: resp, Err: queueErr(kv["err"]), RecErr: queueErr(kv["rec-err"])}, nil
	case "leased":
		if err := queueErr(kv["err"]); err != nil {
			return core.Leased{Err: err}, nil
		}
		l := pilotproto.Lease{Granted: true, Epoch: s.cfg.Epoch, Holder: s.cfg.PilotID, TTLMS: s.cfg.LeaseTTL.Milliseconds()}
		if h, ok := kv["holder"]; ok {
			l.Granted, l.Holder = false, h
			if e, err := strconv.ParseInt(kv["epoch"], 10, 64); err == nil {
				l.Epoch = e
			}
		}
		if v, ok := kv["ttl"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, err
			}
			l.TTLMS = d.Milliseconds()
		}
		return core.Leased{Lease: l}, nil
	case "stop":
		return core.Stop{}, nil
	case "commit-failed":
		return core.CommitFailed{Err: errors.New("checkpoint holds epoch 9: fenced by a newer master")}, nil
	}
	return nil, fmt.Errorf("unknown command %q", b.cmd)
}

func queueErr(name string) error {
	switch name {
	case "":
		return nil
	case "stale":
		return fmt.Errorf("%w: epoch is older than the current epoch", api.ErrStaleEpoch)
	case "expired":
		return fmt.Errorf("%w: renew it", api.ErrLeaseExpired)
	case "down":
		return errors.New("connection refused")
	}
	return fmt.Errorf("unknown queue error %q", name)
}

func keyValues(args []string) (map[string]string, []string) {
	kv := map[string]string{}
	var pos []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	return kv, pos
}

func duration(pos []string, i int) (time.Duration, error) {
	if len(pos) <= i {
		return 0, errors.New("want a duration")
	}
	return time.ParseDuration(strings.TrimPrefix(pos[i], "+"))
}

func parseRef(s string) (pilotproto.TaskRef, error) {
	a, b, ok := strings.Cut(s, "/")
	id, err1 := strconv.ParseInt(a, 10, 64)
	at, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return pilotproto.TaskRef{}, fmt.Errorf("task ref %q: want TASK/ATTEMPT", s)
	}
	return pilotproto.TaskRef{TaskID: id, Attempt: at}, nil
}

func refs(s string) ([]pilotproto.TaskRef, error) {
	var out []pilotproto.TaskRef
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		k, err := parseRef(f)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

func ints64(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// parseTasks reads lines "job=J tasks=A-B [batch-size=N] [attempt=N] [timeout=D]".
func parseTasks(lines []string) ([]pilotproto.Task, error) {
	var out []pilotproto.Task
	for _, l := range lines {
		kv, _ := keyValues(strings.Fields(l))
		job, err := strconv.ParseInt(kv["job"], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: job: %w", l, err)
		}
		lo, hi, _ := strings.Cut(kv["tasks"], "-")
		if hi == "" {
			hi = lo
		}
		a, err1 := strconv.ParseInt(lo, 10, 64)
		z, err2 := strconv.ParseInt(hi, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%q: want tasks=A-B", l)
		}
		t := pilotproto.Task{JobID: job, Attempt: 1, BatchSize: 1, Command: []string{"prog"}}
		if v, ok := kv["batch-size"]; ok {
			if t.BatchSize, err = strconv.Atoi(v); err != nil {
				return nil, err
			}
		}
		if v, ok := kv["attempt"]; ok {
			if t.Attempt, err = strconv.Atoi(v); err != nil {
				return nil, err
			}
		}
		if v, ok := kv["timeout"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, err
			}
			t.TimeoutS = int64(d / time.Second)
		}
		for id := a; id <= z; id++ {
			t.ID = id
			out = append(out, t)
		}
	}
	return out, nil
}

// parseRows reads checkpoint rows: "pending|assigned|final REF job=J
// [batch-size=N] [worker=W batch=B] [status=S]" and "estimate job=J n=N
// mean=SECONDS dev=SECONDS".
func parseRows(lines []string) ([]core.Row, map[int64]core.Estimator, error) {
	var rows []core.Row
	est := map[int64]core.Estimator{}
	for _, l := range lines {
		f := strings.Fields(l)
		kv, pos := keyValues(f[1:])
		job, err := strconv.ParseInt(kv["job"], 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("%q: job: %w", l, err)
		}
		if f[0] == "estimate" {
			var e core.Estimator
			e.N, _ = strconv.Atoi(kv["n"])
			e.Mean, _ = strconv.ParseFloat(kv["mean"], 64)
			e.Dev, _ = strconv.ParseFloat(kv["dev"], 64)
			est[job] = e
			continue
		}
		if len(pos) != 1 {
			return nil, nil, fmt.Errorf("%q: want STATE REF ...", l)
		}
		k, err := parseRef(pos[0])
		if err != nil {
			return nil, nil, err
		}
		r := core.Row{State: core.State(f[0]), Task: pilotproto.Task{ID: k.TaskID, Attempt: k.Attempt, JobID: job, BatchSize: 1, Command: []string{"prog"}}}
		if v, ok := kv["batch-size"]; ok {
			r.Task.BatchSize, _ = strconv.Atoi(v)
		}
		r.Worker, r.Address = kv["worker"], kv["address"]
		r.Batch, _ = strconv.ParseInt(kv["batch"], 10, 64)
		if st, ok := kv["status"]; ok {
			r.Result = &pilotproto.Result{TaskID: k.TaskID, Attempt: k.Attempt, Status: st}
		}
		switch r.State {
		case core.StatePending, core.StateAssigned, core.StateFinal:
		default:
			return nil, nil, fmt.Errorf("%q: unknown state", l)
		}
		rows = append(rows, r)
	}
	return rows, est, nil
}

// ---- output ----

func (s *scenario) rel(t time.Time) string { return "+" + t.Sub(t0).String() }

func refStr(k pilotproto.TaskRef) string { return fmt.Sprintf("%d/%d", k.TaskID, k.Attempt) }

// heldRefs is what a heartbeat lists as held, task by task, in order.
func heldRefs(hb pilotproto.HeartbeatRequest) []pilotproto.TaskRef {
	refs := slices.Clone(hb.Running)
	if hb.Ranges != nil {
		rs, err := hb.Ranges.Unpack(1 << 20)
		if err != nil {
			panic(err) // the master's own ranges
		}
		for _, r := range rs {
			for id := r.First; id <= r.Last; id++ {
				refs = append(refs, pilotproto.TaskRef{TaskID: id, Attempt: r.Attempt})
			}
		}
	}
	slices.SortFunc(refs, func(a, b pilotproto.TaskRef) int {
		return cmp.Or(cmp.Compare(a.TaskID, b.TaskID), cmp.Compare(a.Attempt, b.Attempt))
	})
	return refs
}

func refList(ks []pilotproto.TaskRef) string {
	const most = 12
	var b []string
	for i, k := range ks {
		if i == most {
			b = append(b, fmt.Sprintf("... (%d)", len(ks)))
			break
		}
		b = append(b, refStr(k))
	}
	return "[" + strings.Join(b, " ") + "]"
}

func taskRefs(ts []pilotproto.Task) []pilotproto.TaskRef {
	var out []pilotproto.TaskRef
	for _, t := range ts {
		out = append(out, pilotproto.TaskRef{TaskID: t.ID, Attempt: t.Attempt})
	}
	return out
}

func (s *scenario) format(rd core.Ready) string {
	var b strings.Builder
	line := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	// Ops of one kind on consecutive tasks print as one line: "op add 1-30/1 (job 1)".
	var last string
	var first, prev pilotproto.TaskRef
	flush := func() {
		if last == "" {
			return
		}
		ids := fmt.Sprint(first.TaskID)
		if prev.TaskID != first.TaskID {
			ids += fmt.Sprintf("-%d", prev.TaskID)
		}
		line("%s", strings.Replace(last, "REF", fmt.Sprintf("%s/%d", ids, first.Attempt), 1))
		last = ""
	}
	for _, o := range rd.Ops {
		var text string
		switch o.Kind {
		case core.OpAdd:
			text = fmt.Sprintf("op add REF (job %d)", o.Task.JobID)
		case core.OpAssign:
			text = fmt.Sprintf("op assign REF to %s batch %d", o.Worker, o.Batch)
		case core.OpRequeue:
			text = "op requeue REF"
		case core.OpFinish:
			text = "op finish REF " + o.Result.Status
		case core.OpDelete:
			text = "op delete REF"
		case core.OpEstimate:
			d, _ := o.Est.Estimate()
			text = fmt.Sprintf("op estimate job %d: %s after %d results", o.Job, d.Round(time.Millisecond), o.Est.N)
		case core.OpFenceCheck:
			text = "op fence-check"
		case core.OpWorker:
			text = fmt.Sprintf("op worker %s at %s", o.Worker, o.Address)
		case core.OpCapacity:
			text = fmt.Sprintf("op capacity %s (good %d, bad %d)", o.Capacity.Phase, o.Capacity.Good, o.Capacity.Bad)
		}
		if !strings.Contains(text, "REF") {
			flush()
			line("%s", text)
			continue
		}
		if text == last && o.Ref.TaskID == prev.TaskID+1 && o.Ref.Attempt == prev.Attempt {
			prev = o.Ref
			continue
		}
		flush()
		last, first, prev = text, o.Ref, o.Ref
	}
	flush()
	for _, r := range rd.Replies {
		switch {
		case r.Err != nil:
			line("reply #%d error: %v", r.Req, r.Err)
		case r.Register != nil:
			line("reply #%d register: epoch %d, drop %s", r.Req, r.Register.Epoch, refList(r.Register.Drop))
		case r.Pull != nil:
			var parts []string
			for _, bt := range r.Pull.Batches {
				parts = append(parts, fmt.Sprintf("batch %d %s", bt.ID, refList(taskRefs(bt.Tasks))))
			}
			if len(r.Pull.KillJobs) > 0 {
				parts = append(parts, fmt.Sprintf("kill jobs %v", r.Pull.KillJobs))
			}
			if len(parts) == 0 {
				parts = []string{"nothing"}
			}
			line("reply #%d pull: %s", r.Req, strings.Join(parts, ", "))
		case r.Results != nil:
			line("reply #%d results: accepted %d", r.Req, r.Results.Accepted)
		case r.Heartbeat != nil:
			if ms := r.Heartbeat.DeadlineMS; ms > 0 {
				line("reply #%d heartbeat: kill jobs %v, deadline %s", r.Req, r.Heartbeat.KillJobs, s.rel(time.UnixMilli(ms)))
			} else {
				line("reply #%d heartbeat: kill jobs %v", r.Req, r.Heartbeat.KillJobs)
			}
		}
	}
	if p := rd.Pull; p != nil {
		line("queue pull: max %d (epoch %d)", p.Max, p.Epoch)
	}
	if r := rd.Report; r != nil {
		var parts []string
		for _, res := range r.Results {
			parts = append(parts, fmt.Sprintf("%d/%d %s", res.TaskID, res.Attempt, res.Status))
		}
		line("queue report: %s", strings.Join(parts, ", "))
	}
	if bt := rd.Beat; bt != nil {
		var pilots []string
		for _, p := range bt.Heartbeat.Pilots {
			ps := p.PilotID
			if p.Busy {
				ps += " busy"
			} else {
				ps += " idle"
			}
			if p.Deadline > 0 {
				ps += " until " + s.rel(time.Unix(p.Deadline, 0))
			}
			pilots = append(pilots, ps)
		}
		rec := bt.Recommendation
		capa := ""
		if rec.CapacityPhase != "" {
			capa = fmt.Sprintf("; capacity %s, cap %d nodes, pool slots %d", rec.CapacityPhase, rec.MaxNodes, rec.Slots)
		}
		lost := ""
		if ms := bt.Heartbeat.LostMS; ms > 0 {
			lost = fmt.Sprintf(", lost %s", time.Duration(ms)*time.Millisecond)
		}
		if bt.Final {
			line("queue heartbeat (final): holding %s, pilots [%s]%s", refList(heldRefs(bt.Heartbeat)), strings.Join(pilots, ", "), lost)
		} else {
			line("queue heartbeat: holding %s, pilots [%s]%s; recommend %d nodes (pending %d, running %d, slots %d)%s",
				refList(heldRefs(bt.Heartbeat)), strings.Join(pilots, ", "), lost, rec.MinNodes, rec.PendingTasks, rec.RunningTasks, rec.SlotsPerNode, capa)
		}
	}
	if l := rd.Lease; l != nil {
		if l.Release {
			line("queue lease: release epoch %d", l.Epoch)
		} else {
			line("queue lease: renew epoch %d", l.Epoch)
		}
	}
	if rd.Done {
		if rd.Err != nil {
			line("done: %v", rd.Err)
		} else {
			line("done: stopped gracefully")
		}
	}
	if n := s.c.Next(); !n.IsZero() {
		line("next tick %s", s.rel(n))
	}
	return b.String()
}
