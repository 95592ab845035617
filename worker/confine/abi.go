package confine

import "github.com/landlock-lsm/go-landlock/landlock"

// required is what a confined task's Landlock rules handle (restrict).
// Under ModeRequire the kernel must know all of it: else every task fails
// at its start ("missing kernel Landlock support").
var required = landlock.MustConfig(landlock.V7.HandledAccessFS, landlock.V7.Scoped)

// runnerRules is what a task runner's own domain handles: the file rules,
// no scoping. Landlock gives each of the runner's threads a domain of its
// own (the rules applied thread by thread, psx), and a domain scoped for
// signals may signal only what is nested in it: the runner's goroutine,
// which moves between threads, could then stop only the tasks started
// from the thread it is on. Its tasks' own domains, nested in the
// runner's, are scoped (RunnerPolicy.Tasks, scopeRuleset): what a task may
// signal or connect to is unchanged; the runner, which runs none of the
// job's code, may signal outside its domain.
var runnerRules = landlock.MustConfig(landlock.V7.HandledAccessFS)

// RequiredABI is the oldest Landlock ABI that handles all of required:
// ModeRequire needs it (ABI 6: Linux 6.12, which added the scoping of
// signals and abstract sockets). ModeAuto confines with what older ones
// have.
func RequiredABI() int {
	for i, v := range []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7} {
		if required.HandledAccessFS&^v.HandledAccessFS == 0 && required.Scoped&^v.Scoped == 0 {
			return i + 1
		}
	}
	return 7
}
