package master

import (
	"context"
	"time"
)

// Commits returns the checkpoint transactions m's commits began so far.
func Commits(m *Master) int64 { return m.cp.commits.Load() }

// Gate makes m's checkpoint commits wait until the returned func is
// called: a commit that takes its time (the shared file system is slow).
func Gate(m *Master) (open func()) {
	ch := make(chan struct{})
	m.cp.gate.Store(&ch)
	return func() { close(ch) }
}

// Migrations are the checkpoint's schema migrations.
var Migrations = migrations

// OnProbe makes m call f with each restored worker's probe verdict (call
// it before Run).
func OnProbe(m *Master, f func(worker string, v Verdict, gone bool)) { m.onProbe = f }

// Judge runs r on addr with probe.
func Judge(r ProbeRule, ctx context.Context, addr string, probe func(context.Context, string, time.Duration) Verdict) (bool, Verdict) {
	return r.judge(ctx, addr, probe)
}
