package master

import (
	"path/filepath"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// fitsPlain, the per-task check of a known job's form, says yes only
// where formOf, the full one, does (where it says no, add asks formOf),
// and yes for a plain name of the job's form.
func TestFitsPlainAgreesWithFormOf(t *testing.T) {
	task := func(ds, out, name string) pilotproto.Task {
		return pilotproto.Task{ID: 7, JobID: 3, Owner: "bob", Attempt: 1, Name: name, Input: filepath.Join(ds, name),
			Output: filepath.Join(out, name), OutputDir: out, Command: []string{"p", "{input}"}, Env: pilotproto.TaskEnv(3, 7), BatchSize: 100}
	}
	base := task("/data/a", "/out/a", "e1")
	known, ok := formOf(&base)
	if !ok || !pilotproto.PlainDir(known.Dataset) || !pilotproto.PlainDir(known.OutputDir) {
		t.Fatalf("the base task does not fit its form: %+v", known)
	}
	for _, tc := range []struct {
		name   string
		change func(*pilotproto.Task)
		plain  bool // fitsPlain says yes
	}{
		{"the same form", func(*pilotproto.Task) {}, true},
		{"another name", func(x *pilotproto.Task) { *x = task("/data/a", "/out/a", "e2") }, true},
		{"a name with a slash", func(x *pilotproto.Task) { *x = task("/data/a", "/out/a", "sub/e2") }, false},
		{"a name of dots", func(x *pilotproto.Task) { *x = task("/data/a", "/out/a", "..") }, false},
		{"an input elsewhere", func(x *pilotproto.Task) { x.Input = "/data/b/e1" }, false},
		{"an unclean input", func(x *pilotproto.Task) { x.Input = "/data/a//e1" }, false},
		{"an output elsewhere", func(x *pilotproto.Task) { x.Output = "/out/b/e1" }, false},
		{"another output directory", func(x *pilotproto.Task) { *x = task("/data/a", "/out/b", "e1") }, false},
		{"another environment", func(x *pilotproto.Task) { x.Env = []string{"HARVEST_JOB=3", "HARVEST_TASK=8"} }, false},
		{"no environment", func(x *pilotproto.Task) { x.Env = nil }, false},
		{"another command", func(x *pilotproto.Task) { x.Command = []string{"q"} }, false},
		{"a nil command", func(x *pilotproto.Task) { x.Command = nil }, false},
		{"another owner", func(x *pilotproto.Task) { x.Owner = "carol" }, false},
		{"a work directory", func(x *pilotproto.Task) { x.WorkDir = "/w" }, false},
		{"another timeout", func(x *pilotproto.Task) { x.TimeoutS = 5 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := base
			tc.change(&x)
			f, full := formOf(&x)
			full = full && sameForm(&known, &f)
			if got := fitsPlain(&known, &x); got != tc.plain || (got && !full) {
				t.Fatalf("fitsPlain %v, formOf and the known form %v", got, full)
			}
		})
	}
}
