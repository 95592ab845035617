package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

func TestDecide(t *testing.T) {
	const now = 1_700_000_000
	tests := []struct {
		name        string
		snap        cluster.Snapshot
		upcoming    []Upcoming
		recommended int
		config      func(*Config)
		wantCase    Case
		wantSubmit  *Submit
		wantRelease []string
		wantReason  string // substring, when it matters
	}{
		// The worked examples of DESIGN.md.
		{
			name:        "Worked example: job 4 fits in the 19 min hole with one more node, so one pilot is released",
			snap:        thesis(10 * minute),
			wantCase:    CaseReleaseForBackfill,
			wantRelease: []string{"p20"},
			wantReason:  "releasing 1 pilot",
		},
		{
			name:       "Worked example: with job 4 at 25 min nothing fits, so 5 pilots of 17 min fill the hole",
			snap:       thesis(25 * minute),
			wantCase:   CaseFillHole,
			wantSubmit: submit(5, 17*minute),
		},
		{
			name: "Contract example: one pilot below the minimum of 10 takes the 5 idle nodes with 1020 s pilots",
			snap: func() cluster.Snapshot {
				s := snap(21, 5, running("1", 5, 1200, 60), pending("3", 10, 1500), pending("4", 6, 600), pilot("p7", unlimited, 300))
				s.MinNodes = 10
				return s
			}(),
			wantCase:   CaseBelowMinNodes,
			wantSubmit: submit(5, 1020),
		},

		// Case 1.
		{
			name:       "With no pending foreign job every idle node gets an unlimited pilot",
			snap:       snap(10, 4, running("1", 6, 60*minute, 0)),
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(4, unlimited),
			wantReason: "no foreign job is pending: submitting 4 pilots with no time limit",
		},
		{
			name: "With no pending foreign job pilots get the partition's MaxTime",
			snap: func() cluster.Snapshot {
				s := snap(10, 4, running("1", 6, 60*minute, 0))
				s.MaxTime = limitPtr(48 * 3600)
				return s
			}(),
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(4, 48*3600),
		},
		{
			name: "With no pending foreign job a shorter configured cap wins over MaxTime and is rounded down",
			snap: func() cluster.Snapshot {
				s := snap(10, 4, running("1", 6, 60*minute, 0))
				s.MaxTime = limitPtr(48 * 3600)
				return s
			}(),
			config:     func(c *Config) { c.MaxPilotLimit = 3600 + 59 },
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(4, 3600),
		},
		{
			name:       "Our own queued pilots are not pending foreign jobs and take their idle node",
			snap:       snap(10, 4, running("1", 6, 60*minute, 0), queuedPilot("p1", unlimited)),
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(3, unlimited),
		},
		{
			name:       "With no pending foreign job and no idle node nothing is submitted",
			snap:       snap(10, 0, running("1", 10, 60*minute, 0)),
			wantCase:   CaseNoIdleNodes,
			wantReason: "no idle node",
		},
		{
			name:       "A configured cap below the granularity leaves nothing to submit",
			snap:       snap(10, 4, running("1", 6, 60*minute, 0)),
			config:     func(c *Config) { c.MaxPilotLimit = 59 },
			wantCase:   CaseHoleTooShort,
			wantReason: "no whole 1m0s",
		},

		// Case 2.
		{
			name: "With KeepRecommended the master's recommendation raises the minimum above the pilots held",
			snap: func() cluster.Snapshot {
				s := thesis(25 * minute)
				s.MinNodes = 0
				return s
			}(),
			config:      func(c *Config) { c.KeepRecommended = true },
			recommended: 12,
			wantCase:    CaseBelowMinNodes,
			wantSubmit:  submit(5, 17*minute),
		},
		{
			name: "By default a recommendation does not keep pilots a waiting top job could use: they are released",
			snap: func() cluster.Snapshot {
				s := thesis(25 * minute)
				s.MinNodes = 0
				return s
			}(),
			recommended: 12,
			// Without pilots both job 3 (10 nodes) and job 4 (6) start now:
			// one round releases for both.
			wantCase:    CaseReleaseForTopJob,
			wantRelease: []string{"p20", "p19", "p18", "p17", "p16", "p15", "p14", "p13", "p12", "p11", "p10"},
			wantReason:  "above the minimum of 0",
		},
		{
			name: "By default a recommendation above the pilots held does not keep pilots a backfill job could use",
			snap: func() cluster.Snapshot {
				s := thesis(10 * minute)
				s.MinNodes = 8
				return s
			}(),
			recommended: 12,
			wantCase:    CaseReleaseForBackfill,
			wantRelease: []string{"p20"},
		},
		{
			name: "By default a recommendation above the pilots held takes idle nodes when the top job cannot start anyway",
			snap: func() cluster.Snapshot {
				s := thesis(25 * minute)
				s.MinNodes = 8
				return s
			}(),
			recommended: 12,
			wantCase:    CaseBelowMinNodes,
			wantSubmit:  submit(5, 17*minute),
		},
		{
			name: "The admin floor wins over a smaller recommendation",
			snap: func() cluster.Snapshot {
				s := thesis(25 * minute)
				s.MinNodes = 12
				return s
			}(),
			recommended: 3,
			wantCase:    CaseBelowMinNodes,
			wantSubmit:  submit(5, 17*minute),
		},
		{
			name: "A recommendation above max nodes is capped, so case 2 does not apply",
			snap: func() cluster.Snapshot {
				s := thesis(25 * minute)
				s.MinNodes = 0
				s.MaxNodes = 11
				return s
			}(),
			config:      func(c *Config) { c.KeepRecommended = true },
			recommended: 20,
			wantCase:    CaseAtMaxNodes,
			wantReason:  "pilots hold 11 of at most 11 nodes",
		},
		{
			name: "Below the minimum but the top job fits the idle nodes: the hole is too short to fill",
			snap: func() cluster.Snapshot {
				s := snap(10, 5, running("1", 5, 60*minute, 0), pending("2", 4, 60*minute))
				s.MinNodes = 3
				return s
			}(),
			wantCase: CaseHoleTooShort,
		},

		// Case 3.
		{
			name: "Releasing the pilots above the minimum lets the top job start now, queued and idle pilots first",
			snap: func() cluster.Snapshot {
				s := snap(12, 2,
					running("1", 4, 60*minute, 0),
					pending("2", 5, 60*minute),
					pilot("101", unlimited, 600, busy),
					pilot("102", 30*minute, 60),
					pilot("103", 20*minute, 60, busy),
					pilot("104", unlimited, 600),
					pilot("105", unlimited, 600),
					queuedPilot("106", 30*minute),
				)
				s.MinNodes = 2
				return s
			}(),
			// I = 2 - 1 queued = 1, need = 4, R = 6, spare = 4.
			wantCase:    CaseReleaseForTopJob,
			wantRelease: []string{"106", "102", "105", "104"},
			wantReason:  "job 2 can start now (5 nodes, 1 idle)",
		},
		{
			name:       "A top job that fits the idle nodes is left to the batch system",
			snap:       snap(10, 6, running("1", 2, 60*minute, 0), pending("2", 6, 60*minute), pilot("p1", unlimited, 0), pilot("p2", unlimited, 0)),
			wantCase:   CaseTopJobFits,
			wantReason: "job 2 needs 6 nodes and 6 are idle",
		},
		{
			name: "Pilots at the minimum are not released for the top job",
			snap: func() cluster.Snapshot {
				s := snap(10, 2, running("1", 6, 60*minute, 0), pending("2", 4, 60*minute), pilot("p1", unlimited, 0), pilot("p2", unlimited, 0))
				s.MinNodes = 2
				return s
			}(),
			// maxTime = 60 min, and then job 1's 6 nodes are enough for job
			// 2: the 2 idle nodes are never needed by the plan, but the
			// pilots still end when job 2 can start (job 1 may end early).
			wantCase:   CaseFillHole,
			wantSubmit: submit(2, 58*minute),
		},

		// Case 4.
		{
			name:       "A foreign job ending within miniTime makes the round wait",
			snap:       snap(10, 2, running("1", 4, 60*minute, 59*minute), running("2", 4, 60*minute, 0), pending("3", 8, 60*minute)),
			wantCase:   CaseJobEndingSoon,
			wantReason: "job 1 ends within 1m0s",
		},
		{
			name:       "A pilot ending within miniTime also makes the round wait",
			snap:       snap(10, 2, running("1", 4, 60*minute, 0), pilot("p1", 10*minute, 9*minute+30), pending("3", 8, 60*minute)),
			wantCase:   CaseJobEndingSoon,
			wantReason: "job p1 ends within 30s",
		},
		{
			name:       "An overrunning job (run time past its limit) counts as ending now",
			snap:       snap(10, 2, running("1", 4, 60*minute, 61*minute), running("2", 4, 60*minute, 0), pending("3", 8, 60*minute)),
			wantCase:   CaseJobEndingSoon,
			wantReason: "job 1 ends within 0s",
		},
		{
			name: "A job ending just after miniTime does not stop the hole from being filled",
			snap: snap(10, 2, running("1", 4, 60*minute, 58*minute+59), running("2", 4, 60*minute, 0), pending("3", 8, 60*minute)),
			// need 6: job 1 frees 4 at 61 s, job 2 frees 4 at 60 min, and job
			// 3 then has its 8 nodes without the 2 idle ones; the pilots
			// end before job 3 starts all the same.
			wantCase:   CaseFillHole,
			wantSubmit: submit(2, 58*minute),
		},

		// Case 5.
		{
			name:       "A pending job that fits the hole and the idle nodes is left to backfill",
			snap:       snap(10, 3, running("1", 7, 30*minute, 0), pending("2", 10, 60*minute), pending("3", 3, 10*minute)),
			wantCase:   CaseBackfillWillStart,
			wantReason: "job 3 needs 3 nodes and 3 are idle before job 2 can start in 30m0s",
		},
		{
			name: "A pending job exactly as long as maxTime backfills: it ends when the top job starts",
			snap: snap(10, 3, running("1", 7, 30*minute, 0), pending("2", 10, 60*minute), pending("3", 3, 30*minute)),
			// maxTime 30 min, TL 30 min: SLURM's backfill (and the
			// simulator's) starts a job whose end meets a reservation.
			wantCase: CaseBackfillWillStart,
		},
		{
			name:       "When unlimited jobs hold the nodes the top job needs, any limited job may backfill",
			snap:       snap(10, 3, running("1", 7, unlimited, 0), pending("2", 10, 60*minute), pending("3", 2, 600*minute)),
			wantCase:   CaseBackfillWillStart,
			wantReason: "can start at no foreseeable time",
		},
		{
			name:     "When the top job can never start, an unlimited job behind it backfills (EASY: every node is extra)",
			snap:     snap(10, 3, running("1", 7, unlimited, 0), pending("2", 10, 60*minute), pending("3", 2, unlimited)),
			wantCase: CaseBackfillWillStart,
		},
		{
			name: "An unlimited hole with nothing that fits gets unlimited pilots",
			snap: snap(10, 3, running("1", 7, unlimited, 0), pending("2", 10, 60*minute), pending("3", 4, unlimited)),
			// the top job needs 7 more nodes than idle, job 3 needs 4 > 3 idle, no pilots to release.
			wantCase:   CaseFillHole,
			wantSubmit: submit(3, unlimited),
		},
		{
			name: "A job longer than the hole backfills onto nodes the top job will not need (EASY extra nodes)",
			// 10 nodes: job 1 (4 nodes) ends in 10 min and the pilots (3) in 9, so 9 nodes are free then
			// and the top job needs 6: 3 are extra. 2 are idle now. Job 4 (3 nodes, 2 h) is longer than
			// the hole but fits in the extra nodes: release 1 pilot so it starts now.
			snap: snap(10, 2, running("1", 4, 10*minute, 0), pilot("p1", 9*minute, 0), pilot("p2", 9*minute, 0),
				pilot("p3", 9*minute, 0), running("9", 1, unlimited, 0), pending("2", 6, 60*minute), pending("4", 3, 120*minute)),
			wantCase:    CaseReleaseForBackfill,
			wantRelease: []string{"p3"},
		},
		{
			name: "A job longer than the hole that does not fit in the extra nodes waits behind pilots",
			snap: snap(10, 2, running("1", 4, 10*minute, 0), pilot("p1", 9*minute, 0), pilot("p2", 9*minute, 0),
				pilot("p3", 9*minute, 0), running("9", 1, unlimited, 0), pending("2", 6, 60*minute), pending("4", 5, 120*minute)),
			// 5 nodes > the 3 extra: it would delay the top job, so it gets a
			// reservation after it; the 2 idle nodes are needed by neither
			// (9 free after 10 min: 6 for job 2, then 5 for job 4), and
			// the pilots end before job 2 starts.
			wantCase:   CaseFillHole,
			wantSubmit: submit(2, 8*minute),
		},
		{
			name: "Pilots are released for a backfill job only above the minimum",
			snap: func() cluster.Snapshot {
				s := thesis(10 * minute)
				s.MinNodes = 11
				return s
			}(),
			wantCase:   CaseFillHole,
			wantSubmit: submit(5, 17*minute),
		},
		{
			name: "The first backfill candidate in priority order decides",
			snap: func() cluster.Snapshot {
				s := thesis(10 * minute)
				// job 5 would fit the idle nodes, but job 4 comes first and needs a release.
				s.Jobs = append(s.Jobs, pending("5", 2, 5*minute))
				return s
			}(),
			wantCase:    CaseReleaseForBackfill,
			wantRelease: []string{"p20"},
		},
		{
			name: "Pending pilots between foreign jobs are skipped when looking for backfill",
			snap: func() cluster.Snapshot {
				s := snap(10, 3, running("1", 7, 30*minute, 0), pending("2", 10, 60*minute), queuedPilot("q1", 10*minute), pending("3", 2, 10*minute))
				return s
			}(),
			// I = 3 - 1 = 2; job 3 fits.
			wantCase:   CaseBackfillWillStart,
			wantReason: "job 3",
		},

		// Case 6.
		{
			name:       "A hole shorter than the margin is left alone",
			snap:       snap(10, 3, running("1", 7, 10*minute, 8*minute), pending("2", 10, 60*minute)),
			wantCase:   CaseHoleTooShort,
			wantReason: "no pending job fits in the hole before job 2 can start in 2m0s",
		},
		{
			name:       "Pilot limits are rounded down to the granularity",
			snap:       snap(10, 3, running("1", 7, 20*minute, 50), pending("2", 10, 60*minute)),
			wantCase:   CaseFillHole,
			wantSubmit: submit(3, 17*minute), // 19m10s - 2m = 17m10s -> 17m
		},
		{
			name:       "A coarser granularity rounds further down",
			snap:       snap(10, 3, running("1", 7, 20*minute, 50), pending("2", 10, 60*minute)),
			config:     func(c *Config) { c.Granularity = 5 * minute },
			wantCase:   CaseFillHole,
			wantSubmit: submit(3, 15*minute),
		},
		{
			name: "Unlimited jobs holding the needed nodes make the hole unlimited, bounded by the partition",
			snap: func() cluster.Snapshot {
				s := snap(10, 3, running("1", 7, unlimited, 0), pending("2", 10, 60*minute))
				s.MaxTime = limitPtr(7200)
				return s
			}(),
			wantCase:   CaseFillHole,
			wantSubmit: submit(3, 7200),
		},
		{
			name:       "An earlier expected start from the batch system shortens the hole",
			snap:       snap(10, 3, running("1", 7, 60*minute, 0), pending("2", 10, 60*minute, expectedAt(now+10*minute))),
			wantCase:   CaseFillHole,
			wantSubmit: submit(3, 8*minute),
		},
		{
			name:       "A later expected start does not lengthen the hole",
			snap:       snap(10, 3, running("1", 7, 60*minute, 0), pending("2", 10, 60*minute, expectedAt(now+90*minute))),
			wantCase:   CaseFillHole,
			wantSubmit: submit(3, 58*minute),
		},
		{
			name:       "An expected start in the past is stale and ignored",
			snap:       snap(10, 3, running("1", 7, 60*minute, 0), pending("2", 10, 60*minute, expectedAt(now-1))),
			wantCase:   CaseFillHole,
			wantSubmit: submit(3, 58*minute),
		},
		{
			name:       "The expected start is ignored when the config says so",
			snap:       snap(10, 3, running("1", 7, 60*minute, 0), pending("2", 10, 60*minute, expectedAt(now+10*minute))),
			config:     func(c *Config) { c.UseExpectedStart = false },
			wantCase:   CaseFillHole,
			wantSubmit: submit(3, 58*minute),
		},
		{
			name:       "An expected start bounds an otherwise unlimited hole",
			snap:       snap(10, 3, running("1", 7, unlimited, 0), pending("2", 10, 60*minute, expectedAt(now+3600))),
			wantCase:   CaseFillHole,
			wantSubmit: submit(3, 58*minute),
		},

		// The ledger.
		{
			name:       "Pilots on the ledger take the idle nodes, so the hole is not filled twice",
			snap:       thesis(25 * minute),
			upcoming:   []Upcoming{{Count: 5, TimeLimit: 17 * minute, SubmittedAt: now - 30}},
			wantCase:   CaseNoIdleNodes,
			wantReason: "no idle node is left",
		},
		{
			name:       "Pilots partly on the ledger leave only the rest of the idle nodes to fill",
			snap:       thesis(25 * minute),
			upcoming:   []Upcoming{{Count: 3, TimeLimit: 17 * minute, SubmittedAt: now}},
			wantCase:   CaseFillHole,
			wantSubmit: submit(2, 17*minute),
		},
		{
			name: "Ledger pilots count towards the minimum",
			snap: func() cluster.Snapshot {
				s := snap(21, 10, running("1", 5, 20*minute, 1*minute), pending("3", 10, 25*minute),
					pilot("p1", unlimited, 0), pilot("p2", unlimited, 0), pilot("p3", unlimited, 0), pilot("p4", unlimited, 0), pilot("p5", unlimited, 0), pilot("p6", unlimited, 0))
				s.MinNodes = 10
				return s
			}(),
			// 6 visible + 4 on the ledger = 10 held; I = 10 - 4 = 6. Job 3
			// needs 4 more nodes, which the ledger pilots free at 17 min.
			upcoming:   []Upcoming{{Count: 4, TimeLimit: 17 * minute, SubmittedAt: now}},
			wantCase:   CaseFillHole,
			wantSubmit: submit(6, 15*minute),
		},
		{
			name: "Ledger pilots cannot be cancelled, so a release frees what is visible",
			snap: func() cluster.Snapshot {
				s := snap(10, 4, running("1", 6, 60*minute, 0), pending("2", 4, 60*minute), pilot("p1", unlimited, 0))
				return s
			}(),
			// held 1 + 4 ledger = 5, I = 0, need 4 <= 5: only p1 can go.
			upcoming:    []Upcoming{{Count: 4, TimeLimit: 58 * minute, SubmittedAt: now}},
			wantCase:    CaseReleaseForTopJob,
			wantRelease: []string{"p1"},
			wantReason:  "not enough yet",
		},
		{
			name: "Ledger pilots free their nodes in the maxTime walk when their limit ends",
			snap: snap(10, 8, running("1", 2, 60*minute, 0), pending("2", 10, 60*minute), pending("3", 2, 100*minute)),
			// 8 idle, 6 taken by the ledger (ending in 20 min - 5 min elapsed), I = 2.
			// need = 8: ledger frees 6 at 15 min, job 1 frees 2 at 60 min -> maxTime 60 min.
			upcoming:   []Upcoming{{Count: 6, TimeLimit: 20 * minute, SubmittedAt: now - 5*minute}},
			wantCase:   CaseFillHole,
			wantSubmit: submit(2, 58*minute),
		},

		// Demand.
		{
			name: "An empty backlog releases the queued and idle pilots and keeps the busy one",
			snap: func() cluster.Snapshot {
				s := snap(10, 2, running("1", 5, 60*minute, 0), pilot("p1", unlimited, 0, busy), pilot("p2", unlimited, 0), queuedPilot("p3", unlimited))
				s.Demand = &cluster.Demand{SlotsPerNode: 8}
				s.MinNodes = 5
				return s
			}(),
			wantCase:    CaseNoDemand,
			wantRelease: []string{"p3", "p2"},
		},
		{
			name: "A shrinking backlog releases idle pilots but keeps the master's, which looks idle with one core per node",
			snap: func() cluster.Snapshot {
				s := snap(8, 0, running("1", 2, 60*minute, 0),
					pilot("150", unlimited, 60), pilot("151", unlimited, 60), pilot("152", unlimited, 60, busy),
					pilot("153", unlimited, 60), pilot("154", unlimited, 60, busy), pilot("155", unlimited, 60, master))
				s.Demand = &cluster.Demand{RunningTasks: 3, SlotsPerNode: 1}
				return s
			}(),
			wantCase:    CaseAboveDemand,
			wantRelease: []string{"153", "151", "150"},
		},
		{
			name: "An empty backlog with nothing to release submits nothing",
			snap: func() cluster.Snapshot {
				s := snap(10, 5, running("1", 5, 60*minute, 0))
				s.Demand = &cluster.Demand{SlotsPerNode: 8}
				return s
			}(),
			wantCase:   CaseNoDemand,
			wantReason: "backlog is empty",
		},
		{
			name: "With harvest-while-idle an empty backlog is still harvested",
			snap: func() cluster.Snapshot {
				s := snap(10, 5, running("1", 5, 60*minute, 0))
				s.Demand = &cluster.Demand{SlotsPerNode: 8}
				return s
			}(),
			config:     func(c *Config) { c.HarvestWhileIdle = true },
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(5, unlimited),
		},
		{
			name: "A small backlog caps the submission at the nodes it can use",
			snap: func() cluster.Snapshot {
				s := snap(10, 5, running("1", 4, 60*minute, 0), pilot("p1", unlimited, 0, busy))
				s.Demand = &cluster.Demand{PendingTasks: 7, RunningTasks: 4, SlotsPerNode: 4}
				return s
			}(),
			// ceil(11/4) = 3 nodes useful, 1 held: 2 more.
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(2, unlimited),
			wantReason: "on 2 of the 5 idle nodes, as the backlog of 11 tasks can use 3 nodes",
		},
		{
			name: "A backlog that is fully served submits nothing",
			snap: func() cluster.Snapshot {
				s := snap(10, 5, running("1", 2, 60*minute, 0), pilot("p1", unlimited, 0, busy), pilot("p2", unlimited, 0, busy), pilot("p3", unlimited, 0, busy))
				s.Demand = &cluster.Demand{PendingTasks: 0, RunningTasks: 12, SlotsPerNode: 4}
				return s
			}(),
			wantCase: CaseDemandMet,
		},
		{
			name: "Pilots beyond what the backlog can use are released, idle ones only",
			snap: func() cluster.Snapshot {
				s := snap(10, 0, running("1", 6, 60*minute, 0), pilot("p1", unlimited, 0, busy), pilot("p2", unlimited, 0, busy), pilot("p3", unlimited, 0, busy), pilot("p4", unlimited, 0))
				s.Demand = &cluster.Demand{PendingTasks: 0, RunningTasks: 2, SlotsPerNode: 4}
				return s
			}(),
			// useful 1, held 4: release 3 but only p4 is idle.
			wantCase:    CaseAboveDemand,
			wantRelease: []string{"p4"},
		},
		{
			name: "The backlog caps the minimum too, so a small backlog does not trigger case 2",
			snap: func() cluster.Snapshot {
				s := thesis(25 * minute)
				s.Demand = &cluster.Demand{PendingTasks: 40, RunningTasks: 4, SlotsPerNode: 4}
				return s
			}(),
			// useful 11 = held 11: nothing more.
			wantCase: CaseDemandMet,
		},
		{
			name: "slots_per_node 0 is read as one slot per node",
			snap: func() cluster.Snapshot {
				s := snap(10, 5, running("1", 5, 60*minute, 0))
				s.Demand = &cluster.Demand{PendingTasks: 3}
				return s
			}(),
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(3, unlimited),
		},

		// Min and max nodes.
		{
			name: "Pilots above max nodes are released, busy ones last",
			snap: func() cluster.Snapshot {
				s := snap(10, 0, running("1", 6, 60*minute, 0), pilot("1001", unlimited, 0, busy), pilot("1002", unlimited, 0, busy), pilot("1003", 30*minute, 0, busy), pilot("1004", unlimited, 0))
				s.MaxNodes = 2
				return s
			}(),
			wantCase:    CaseAboveMaxNodes,
			wantRelease: []string{"1004", "1003"},
		},
		{
			name: "Submission stops at max nodes",
			snap: func() cluster.Snapshot {
				s := snap(10, 5, running("1", 3, 60*minute, 0), pilot("p1", unlimited, 0), pilot("p2", unlimited, 0))
				s.MaxNodes = 5
				return s
			}(),
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(3, unlimited),
			wantReason: "as pilots hold 2 of at most 5 nodes",
		},
		{
			name: "The snapshot's max_nodes overrides the config",
			snap: func() cluster.Snapshot {
				s := snap(10, 5, running("1", 3, 60*minute, 0), pilot("p1", unlimited, 0), pilot("p2", unlimited, 0))
				s.MaxNodes = 6
				return s
			}(),
			config:     func(c *Config) { c.MaxNodes = 3 },
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(4, unlimited),
		},
		{
			name:       "The config's max nodes applies when the snapshot has none",
			snap:       snap(10, 5, running("1", 3, 60*minute, 0), pilot("p1", unlimited, 0), pilot("p2", unlimited, 0)),
			config:     func(c *Config) { c.MaxNodes = 3 },
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(1, unlimited),
		},
		{
			name:        "The config's min nodes applies when the snapshot has none",
			snap:        func() cluster.Snapshot { s := thesis(10 * minute); s.MinNodes = 0; return s }(),
			config:      func(c *Config) { c.MinNodes = 11 },
			wantCase:    CaseFillHole,
			wantSubmit:  submit(5, 17*minute),
			wantRelease: nil,
		},

		// Bad input.
		{
			name:       "A snapshot with a duplicate job id decides nothing",
			snap:       snap(10, 5, running("1", 3, 60*minute, 0), pending("1", 3, 60*minute)),
			wantCase:   CaseInvalidInput,
			wantReason: `job id "1" appears twice`,
		},
		{
			name:       "A zero partition MaxTime is rejected rather than read as no time at all",
			snap:       func() cluster.Snapshot { s := snap(10, 5); s.MaxTime = limitPtr(0); return s }(),
			wantCase:   CaseInvalidInput,
			wantReason: "max_time_s",
		},
		{
			name:       "A negative ledger count is rejected",
			snap:       snap(10, 5),
			upcoming:   []Upcoming{{Count: -1, TimeLimit: 60}},
			wantCase:   CaseInvalidInput,
			wantReason: "count -1",
		},
		{
			name:       "An invalid config decides nothing",
			snap:       snap(10, 5),
			config:     func(c *Config) { c.Granularity = 0 },
			wantCase:   CaseInvalidInput,
			wantReason: "granularity",
		},
		{
			name:        "A negative recommendation is rejected",
			snap:        snap(10, 5),
			recommended: -1,
			wantCase:    CaseInvalidInput,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := thesisConfig()
			cfg.MiniTime = minute
			if tc.config != nil {
				tc.config(&cfg)
			}
			tc.snap.Now = now
			d := Decide(Input{Snapshot: tc.snap, Upcoming: tc.upcoming, Recommended: tc.recommended}, cfg)
			if d.Case != tc.wantCase {
				t.Errorf("case = %q, want %q (reason: %s)", d.Case, tc.wantCase, d.Reason)
			}
			if !reflect.DeepEqual(d.Submit, tc.wantSubmit) {
				t.Errorf("submit = %+v, want %+v (reason: %s)", d.Submit, tc.wantSubmit, d.Reason)
			}
			want := tc.wantRelease
			if want == nil {
				want = []string{}
			}
			if !reflect.DeepEqual(d.Release, want) {
				t.Errorf("release = %q, want %q (reason: %s)", d.Release, want, d.Reason)
			}
			if !strings.Contains(d.Reason, tc.wantReason) {
				t.Errorf("reason = %q, want it to contain %q", d.Reason, tc.wantReason)
			}
			if d.Reason == "" {
				t.Error("empty reason")
			}
		})
	}
}

func TestDecideWorkedExampleFigures(t *testing.T) {
	d := Decide(Input{Snapshot: thesis(10 * minute)}, thesisConfig())
	if d.MaxTime != 19*minute || d.TopJob != "3" || d.MinNodes != 10 || d.Held != 11 || d.Idle != 5 {
		t.Errorf("figures = max_time %v top %q min %d held %d idle %d, want 1140s 3 10 11 5",
			d.MaxTime, d.TopJob, d.MinNodes, d.Held, d.Idle)
	}
}

func TestDecisionJSONContract(t *testing.T) {
	tests := []struct {
		name string
		d    Decision
		want string
	}{
		{
			name: "Nothing to do writes submit null and an empty release array",
			d:    Decide(Input{Snapshot: snap(10, 0, running("1", 10, 60, 0))}, DefaultConfig()),
			want: `{"submit":null,"release":[],`,
		},
		{
			name: "A submission writes count and time_limit_s",
			d:    Decide(Input{Snapshot: thesis(25 * minute)}, thesisConfig()),
			want: `{"submit":{"count":5,"time_limit_s":1020},"release":[],`,
		},
		{
			name: "An unlimited submission writes time_limit_s null",
			d:    Decide(Input{Snapshot: snap(10, 4)}, DefaultConfig()),
			want: `{"submit":{"count":4,"time_limit_s":null},"release":[],`,
		},
		{
			name: "A release writes the ids in cancel order",
			d:    Decide(Input{Snapshot: thesis(10 * minute)}, thesisConfig()),
			want: `{"submit":null,"release":["p20"],"reason":`,
		},
		{
			name: "An invalid snapshot still writes the contract's fields",
			d:    Decide(Input{Snapshot: snap(1, 5)}, DefaultConfig()),
			want: `{"submit":null,"release":[],"reason":"nothing done: invalid snapshot: idle_nodes 5 exceeds total_nodes 1","case":"invalid-input"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.d)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(b), tc.want) {
				t.Errorf("JSON = %s, want prefix %s", b, tc.want)
			}
		})
	}
}

func TestDecideDoesNotModifyInput(t *testing.T) {
	s := thesis(10 * minute)
	before, _ := json.Marshal(s)
	Decide(Input{Snapshot: s}, thesisConfig())
	after, _ := json.Marshal(s)
	if string(before) != string(after) {
		t.Errorf("Decide changed its input:\n%s\n%s", before, after)
	}
}
