package policy

import (
	"fmt"

	"github.com/harvest-hpc/harvest/cluster"
)

// drain releases every visible pilot in release order, busy ones only
// with dr.Now (the others finish their batch and go in a later round,
// once the queue reports them idle). Pilots on the ledger have no id to
// cancel yet; they go when they show up.
func (v *view) drain(d Decision, dr Drain) Decision {
	d.Case = CaseDrain
	var pilots []cluster.Job
	for _, j := range v.s.Jobs {
		if j.Pilot {
			pilots = append(pilots, j)
		}
	}
	busy := 0
	for _, p := range ReleaseOrder(pilots) {
		if !dr.Now && p.State == cluster.Running && p.Busy {
			busy++
			continue
		}
		d.Release = append(d.Release, p.ID)
	}
	upcoming := 0
	for _, u := range v.in.Upcoming {
		upcoming += u.Count
	}
	d.Reason = "draining"
	if dr.Now {
		d.Reason += " now"
	}
	switch {
	case len(d.Release) > 0:
		d.Reason += ": releasing " + pilotsWord(len(d.Release))
	case busy+upcoming == 0:
		d.Reason += ": no pilot left"
	default:
		d.Reason += ": nothing to release this round"
	}
	switch {
	case busy == 1:
		d.Reason += "; 1 busy pilot goes after its batch"
	case busy > 1:
		d.Reason += fmt.Sprintf("; %d busy pilots go after their batch", busy)
	}
	switch {
	case upcoming == 1:
		d.Reason += "; 1 pilot submitted earlier goes when the batch system shows it"
	case upcoming > 1:
		d.Reason += fmt.Sprintf("; %d pilots submitted earlier go when the batch system shows them", upcoming)
	}
	return d
}
