package slurm

import (
	"strings"

	"github.com/harvest-hpc/harvest/cluster"
)

// What sinfo's %T prints, and what it means for harvesting. sinfo prints
// node_state_string() in lower case (src/sinfo/print.c
// _print_state_long, the same from 22.05 to 24.05): a base state, or a
// state named after a flag (MAINT, REBOOT^, DRAINED...), then at most one
// suffix character for the first flag that applies
// (src/common/slurm_protocol_defs.c node_state_string). Newer releases,
// and the StateComplete field, print the base and every flag joined by
// '+' ("IDLE+CLOUD+POWERED_DOWN"); both forms are read. The table is in
// docs/slurm.md.

// baseStates maps a state word to what the node is for harvesting. The
// words are node_state_string's (and node_state_string_compact's, which
// sinfo %t prints).
var baseStates = map[string]cluster.NodeState{
	// Free: SLURM starts a job there at once.
	"idle": cluster.NodeIdle,
	// Idle, but the backfill scheduler holds it for a pending job.
	"planned": cluster.NodePlanned, "plnd": cluster.NodePlanned,
	// Running jobs (mixed: some of its CPUs; completing: a job ending).
	"allocated": cluster.NodeAllocated, "alloc": cluster.NodeAllocated,
	"mixed": cluster.NodeAllocated, "mix": cluster.NodeAllocated,
	"completing": cluster.NodeAllocated, "comp": cluster.NodeAllocated,
	// Everything else starts no pilot now: counted as drained, never as
	// idle. Draining and failing nodes still run jobs but take no new one.
	"drained": cluster.NodeDrained, "drain": cluster.NodeDrained,
	"draining": cluster.NodeDrained, "drng": cluster.NodeDrained,
	"down": cluster.NodeDrained,
	"fail": cluster.NodeDrained, "failing": cluster.NodeDrained, "failg": cluster.NodeDrained,
	"maint":  cluster.NodeDrained,                              // in a maintenance reservation
	"reboot": cluster.NodeDrained, "boot": cluster.NodeDrained, // reboot pending or under way
	"reboot_issued": cluster.NodeDrained, "cancel_reboot": cluster.NodeDrained, "canc_r": cluster.NodeDrained,
	"reserved": cluster.NodeDrained, "resv": cluster.NodeDrained, // in an advance reservation
	"perfctrs": cluster.NodeDrained, "npc": cluster.NodeDrained, // network performance counters in use (Cray)
	"future": cluster.NodeDrained, "futr": cluster.NodeDrained, // configured, not there yet
	"cloud":      cluster.NodeDrained, // a cloud node not provisioned
	"power_down": cluster.NodeDrained, "pow_dn": cluster.NodeDrained,
	"power_up": cluster.NodeDrained, "pow_up": cluster.NodeDrained,
	"powering_down": cluster.NodeDrained, "powring_dn": cluster.NodeDrained,
	"powered_down": cluster.NodeDrained, "powered_dn": cluster.NodeDrained,
	"powering_up": cluster.NodeDrained,
	"resume":      cluster.NodeDrained, // a resume request in flight
	"inval":       cluster.NodeDrained, // registered with an invalid configuration
	"blocked":     cluster.NodeDrained, // 23.11+: blocked by an exclusive job's topology
	"unknown":     cluster.NodeDrained, "unk": cluster.NodeDrained,
}

// suffixFlags are node_state_string's one-character flags: what each
// means and what it does to a node that would otherwise be idle. On an
// allocated node only '*' matters (its jobs run on; the others concern
// what happens after them).
var suffixFlags = map[byte]struct {
	meaning string
	idle    cluster.NodeState // the state of an idle or planned node with this flag
}{
	'*': {"not responding", cluster.NodeDrained},
	'~': {"powered off (power saving): a job must wait for it to boot", cluster.NodeDrained},
	'#': {"powering up, or being configured for a job", cluster.NodeDrained},
	'!': {"to be powered down", cluster.NodeDrained},
	'%': {"powering down", cluster.NodeDrained},
	'$': {"in a maintenance reservation", cluster.NodeDrained},
	'@': {"reboot requested", cluster.NodeDrained},
	'^': {"reboot issued", cluster.NodeDrained},
	'-': {"planned by the backfill scheduler", cluster.NodePlanned},
	'+': {"a job completing", cluster.NodeAllocated},
	'?': {"a flag this release does not name", cluster.NodeDrained},
}

// joinedFlags are the flag words of the '+'-joined form
// (node_state_flags[] in slurm_protocol_defs.c) that leave a node as its
// base state says; every other word (DRAIN, POWERED_DOWN, MAINTENANCE,
// NOT_RESPONDING, a word a later release adds...) makes an idle node not
// idle, and NOT_RESPONDING, DRAIN and FAIL make an allocated one drained.
var joinedFlags = map[string]cluster.NodeState{
	"planned":      cluster.NodePlanned,
	"completing":   cluster.NodeAllocated,
	"dynamic_norm": "", // a dynamic node in normal use
}

// nodeState maps sinfo's state (%T) to the snapshot's node state. A state
// it does not know is drained: never idle, and never an error that would
// fail the rest of the snapshot. Only text that cannot be a state at all
// (a number, spaces, an empty field: a shifted or broken line) is an
// error.
func nodeState(s string) (cluster.NodeState, error) {
	if s == "" || len(s) > 100 {
		return "", parseErr("bad node state %q", trunc(s))
	}
	letters := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			letters = true
		case c == '_' || suffixFlags[c].meaning != "":
		default:
			return "", parseErr("bad node state %q", trunc(s))
		}
	}
	if !letters {
		if s == "?" { // node_state_string's answer for a state it cannot name
			return cluster.NodeDrained, nil
		}
		return "", parseErr("bad node state %q", trunc(s))
	}
	s = strings.ToLower(s)
	// "IDLE+CLOUD+POWERED_DOWN": a base and flag words.
	if base, rest, ok := strings.Cut(s, "+"); ok && rest != "" {
		return joinedState(base, strings.Split(rest, "+")), nil
	}
	base := strings.TrimRight(s, "*~#!%$@^-+?")
	st, ok := baseStates[base]
	if !ok || strings.ContainsAny(base, "*~#!%$@^-+?") {
		return cluster.NodeDrained, nil
	}
	for _, c := range []byte(s[len(base):]) {
		f := suffixFlags[c]
		switch {
		case c == '*':
			return cluster.NodeDrained, nil
		case st == cluster.NodeIdle || st == cluster.NodePlanned:
			st = f.idle
		}
	}
	return st, nil
}

// joinedState maps the '+'-joined form.
func joinedState(base string, flags []string) cluster.NodeState {
	st, ok := baseStates[base]
	if !ok {
		return cluster.NodeDrained
	}
	for _, f := range flags {
		to, harmless := joinedFlags[f]
		switch {
		case f == "not_responding" || f == "drain" || f == "fail":
			return cluster.NodeDrained
		case st == cluster.NodeAllocated || st == cluster.NodeDrained:
		case !harmless:
			st = cluster.NodeDrained
		case to != "":
			st = to
		}
	}
	return st
}
