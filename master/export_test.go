package master

import "github.com/harvest-hpc/harvest/pilotproto"

// AddPulledForTest feeds tasks as a queue pull would.
func AddPulledForTest(m *Master, tasks []pilotproto.Task) error {
	return m.addPulled(pilotproto.PullResponse{Tasks: tasks})
}
