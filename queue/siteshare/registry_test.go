package siteshare

import (
	"math"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

var t0 = time.Unix(1_700_000_000, 0)

func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

// byName indexes a plan.
func byName(plans []SitePlan) map[string]SitePlan {
	m := map[string]SitePlan{}
	for _, p := range plans {
		m[p.Name] = p
	}
	return m
}

// twoSites has agents a and b, each with idle nodes and a master of slots.
func twoSites(idleA, idleB, slotsA, slotsB int) *Registry {
	r := NewRegistry(DefaultConfig())
	r.Agent("a", AgentReport{Held: 0, Idle: idleA}, t0)
	r.Agent("b", AgentReport{Held: 0, Idle: idleB}, t0)
	r.Master("a", MasterReport{MinNodes: 4, Slots: slotsA, SlotsPerNode: 1}, t0)
	r.Master("b", MasterReport{MinNodes: 4, Slots: slotsB, SlotsPerNode: 1}, t0)
	return r
}

// speeds makes site a return tasks of job 1 in fastS seconds and b in slowS.
func speeds(r *Registry, fastS, slowS float64) {
	for range 20 {
		r.Result("a", 1, fastS, fastS, Done)
		r.Result("b", 1, slowS, slowS, Done)
	}
}

func TestAloneASiteSeesTheWholeBacklogAndHoldsWithoutLimit(t *testing.T) {
	r := NewRegistry(DefaultConfig())
	r.Agent("local", AgentReport{Held: 3, Idle: 2}, t0)
	r.Master("local", MasterReport{MinNodes: 10, Cap: 6, Slots: 3, SlotsPerNode: 1}, t0)
	p := r.Plan(PlanInput{Now: sec(1), Pending: 500, Outstanding: map[string]int{"local": 3}, SiteMax: map[string]int{"local": 8}})
	if len(p) != 1 {
		t.Fatalf("plan %+v", p)
	}
	got := p[0]
	if got.Share != 500 || got.Running != 3 || got.Allowance != -1 || got.Weight != 1 {
		t.Fatalf("plan %+v: want share 500, running 3, no allowance, weight 1", got)
	}
	if got.MaxNodes != 6 || got.Recommended != 6 {
		t.Fatalf("plan %+v: the capacity cap 6 is below the admin's 8 and caps the recommendation of 10", got)
	}
}

func TestEqualSitesShareEqually(t *testing.T) {
	r := twoSites(8, 8, 4, 4)
	p := byName(r.Plan(PlanInput{Now: sec(1), Pending: 10}))
	if p["a"].Share != 5 || p["b"].Share != 5 {
		t.Fatalf("shares %d/%d, want 5/5", p["a"].Share, p["b"].Share)
	}
	if p["a"].Allowance != 8 || p["b"].Allowance != 8 {
		t.Fatalf("allowances %d/%d, want 8/8 (4 slots + one wave)", p["a"].Allowance, p["b"].Allowance)
	}
}

func TestAFastSiteGetsMoreAndASlowPoolHoldsLittleAhead(t *testing.T) {
	r := twoSites(100, 100, 16, 16)
	speeds(r, 10, 30)
	p := byName(r.Plan(PlanInput{Now: sec(1), Pending: 90}))
	if p["a"].Weight != 4 || p["b"].Weight != 0.5 {
		t.Fatalf("weights %v/%v, want 4/0.5", p["a"].Weight, p["b"].Weight)
	}
	if p["a"].Share != 80 || p["b"].Share != 10 {
		t.Fatalf("shares %d/%d, want 80/10", p["a"].Share, p["b"].Share)
	}
	if p["a"].Allowance != 32 || p["b"].Allowance != 18 {
		t.Fatalf("allowances %d/%d, want 32 (two waves) / 18 (barely more than its 16 slots)", p["a"].Allowance, p["b"].Allowance)
	}
	if math.Abs(p["a"].Relative-0.5) > 1e-9 || math.Abs(p["b"].Relative-1.5) > 1e-9 {
		t.Fatalf("relative %v/%v", p["a"].Relative, p["b"].Relative)
	}
}

func TestAFullSiteLeavesItsShareToTheOther(t *testing.T) {
	r := twoSites(0, 8, 2, 0)
	r.Agent("a", AgentReport{Held: 2, Idle: 0}, t0) // 2 pilots, both busy
	p := byName(r.Plan(PlanInput{Now: sec(1), Pending: 10, Outstanding: map[string]int{"a": 2}}))
	// b can start 8; the 2 nobody can start now still go by weight.
	if p["a"].Share != 1 || p["b"].Share != 9 {
		t.Fatalf("shares %d/%d, want 1/9 (b's 8 free slots, then the rest by weight)", p["a"].Share, p["b"].Share)
	}
}

func TestASilentSiteGetsNothingUntilItReturns(t *testing.T) {
	r := twoSites(8, 8, 4, 4)
	// a keeps calling, b goes quiet for longer than SilentAfter.
	r.Agent("a", AgentReport{Idle: 8}, sec(90))
	r.Seen("a", sec(90))
	p := byName(r.Plan(PlanInput{Now: sec(90), Pending: 10}))
	if p["b"].Alive || p["b"].Weight != 0 || p["b"].Share != 0 || p["b"].Allowance != 0 {
		t.Fatalf("silent site b: %+v", p["b"])
	}
	if p["a"].Share != 10 || p["a"].Allowance != -1 {
		t.Fatalf("a alone: %+v, want the whole backlog and no allowance", p["a"])
	}
	r.Seen("b", sec(95)) // its master pulls again
	p = byName(r.Plan(PlanInput{Now: sec(95), Pending: 10}))
	if !p["b"].Alive || p["b"].Weight != 1 || p["b"].Allowance != 8 {
		t.Fatalf("b back: %+v", p["b"])
	}
}

func TestARegisteredSiteNeverHeardFromIsSilent(t *testing.T) {
	r := NewRegistry(DefaultConfig())
	r.Agent("a", AgentReport{Idle: 4}, t0)
	p := byName(r.Plan(PlanInput{Now: t0, Pending: 10, Sites: []string{"a", "new"}}))
	if p["new"].Alive || p["new"].Share != 0 || p["a"].Share != 10 {
		t.Fatalf("plan %+v", p)
	}
}

func TestTheGlobalCapIsSplitByWeight(t *testing.T) {
	t.Run("equal sites split it evenly", func(t *testing.T) {
		r := twoSites(8, 8, 0, 0)
		p := byName(r.Plan(PlanInput{Now: t0, Pending: 100, GlobalMax: 10}))
		if p["a"].MaxNodes != 5 || p["b"].MaxNodes != 5 {
			t.Fatalf("caps %d/%d, want 5/5", p["a"].MaxNodes, p["b"].MaxNodes)
		}
	})
	t.Run("a silent site's pilots still count", func(t *testing.T) {
		r := twoSites(8, 8, 0, 0)
		r.Agent("c", AgentReport{Held: 4}, sec(-120))
		p := byName(r.Plan(PlanInput{Now: t0, Pending: 100, GlobalMax: 10}))
		if p["a"].MaxNodes != 3 || p["b"].MaxNodes != 3 {
			t.Fatalf("caps %d/%d, want 3/3 (4 of 10 held by silent c)", p["a"].MaxNodes, p["b"].MaxNodes)
		}
	})
	t.Run("the smaller of the admin's, the global and the capacity cap wins", func(t *testing.T) {
		r := twoSites(8, 8, 0, 0)
		r.Master("b", MasterReport{MinNodes: 4, Cap: 2}, t0)
		p := byName(r.Plan(PlanInput{Now: t0, Pending: 100, GlobalMax: 10, SiteMax: map[string]int{"a": 4}}))
		if p["a"].MaxNodes != 4 || p["b"].MaxNodes != 2 || p["b"].Recommended != 2 {
			t.Fatalf("a %+v b %+v", p["a"], p["b"])
		}
	})
	t.Run("a site left no part gets no pilot and no backlog", func(t *testing.T) {
		r := twoSites(8, 8, 0, 0)
		p := byName(r.Plan(PlanInput{Now: t0, Pending: 100, GlobalMax: 1}))
		if p["a"].MaxNodes != 1 || p["a"].NoPilots || !p["b"].NoPilots || p["b"].Share != 0 || p["b"].Recommended != 0 {
			t.Fatalf("a %+v b %+v", p["a"], p["b"])
		}
		if p["a"].Share != 100 {
			t.Fatalf("a's share %d, want the whole backlog", p["a"].Share)
		}
	})
}

func TestYield(t *testing.T) {
	cfg := DefaultConfig()
	r := NewRegistry(cfg)
	r.Agent("a", AgentReport{Held: 2}, sec(0))
	r.Agent("a", AgentReport{Held: 4}, sec(10))  // 2 pilots x 10 s
	r.Agent("a", AgentReport{Held: 0}, sec(610)) // silent for 600 s: counted as SilentAfter (60 s) x 4
	r.Result("a", 1, 12, 10, Done)
	r.Result("a", 1, 12, 10, Failed)
	r.Result("a", 1, 1e9, 10, Interrupted)
	y := r.Plan(PlanInput{Now: sec(610)})[0].Yield
	want := Yield{PilotSeconds: 20 + 240, UsefulSeconds: 10, Done: 1, Failed: 1, Interrupted: 1}
	if y != want {
		t.Fatalf("yield %+v, want %+v", y, want)
	}
	// The interrupted attempt's huge turnaround did not count as speed.
	if e, _ := r.tracker.Effective("a", 1); e > 30 {
		t.Fatalf("effective turnaround %v includes the interrupted attempt", e)
	}
	r.ForgetJob(1)
	if _, ok := r.tracker.Effective("a", 1); ok {
		t.Fatal("ForgetJob kept the figures")
	}
	if !r.Alive("a", sec(610)) || r.Alive("a", sec(700)) || r.Alive("nobody", sec(0)) {
		t.Fatal("Alive")
	}
}

func TestAStaleMasterReportIsIgnored(t *testing.T) {
	r := NewRegistry(DefaultConfig())
	r.Agent("a", AgentReport{Idle: 4}, t0)
	r.Master("a", MasterReport{MinNodes: 6, Cap: 3, Slots: 8, SlotsPerNode: 4}, t0)
	p := r.Plan(PlanInput{Now: sec(60)})[0]
	if p.Recommended != 3 || p.MaxNodes != 3 || p.SlotsPerNode != 4 {
		t.Fatalf("fresh report: %+v", p)
	}
	r.Agent("a", AgentReport{Idle: 4}, sec(200))
	p = r.Plan(PlanInput{Now: sec(200)})[0]
	if p.Recommended != 0 || p.MaxNodes != 0 || p.SlotsPerNode != 1 {
		t.Fatalf("report older than the TTL still used: %+v", p)
	}
}

// Job ids start at 1 on every cluster: the same pilot id at two sites is
// two pilots.
func TestPilotsAreKeptPerSite(t *testing.T) {
	r := NewRegistry(DefaultConfig())
	r.Pilots("a", []pilotproto.PilotStatus{{PilotID: "1", Busy: true}, {PilotID: "2"}}, t0)
	r.Pilots("b", []pilotproto.PilotStatus{{PilotID: "1"}}, t0)
	r.Pilots("a", []pilotproto.PilotStatus{{PilotID: "2", Busy: true, Deadline: 99}}, sec(200)) // 1 not listed since t0
	p := byName(r.Plan(PlanInput{Now: sec(350)}))
	if len(p["a"].Busy) != 1 || !p["a"].Busy["2"] {
		t.Fatalf("a's pilots %v: want only 2, busy (1 is older than the pilot TTL)", p["a"].Busy)
	}
	if len(p["b"].Busy) != 0 {
		t.Fatalf("b's pilots %v, want none left", p["b"].Busy)
	}
	r.Pilots("b", []pilotproto.PilotStatus{{PilotID: "1"}}, sec(351))
	p = byName(r.Plan(PlanInput{Now: sec(352)}))
	if b, ok := p["b"].Busy["1"]; !ok || b {
		t.Fatalf("b's pilot 1: %v %v", b, ok)
	}
	if !p["a"].Busy["2"] {
		t.Fatal("b's report changed a's pilot")
	}
	if st := r.PilotStatus("a", sec(352)); st["2"].Deadline != 99 || len(st) != 1 {
		t.Fatalf("a's pilot status %+v", st)
	}
	if st := r.PilotStatus("nobody", sec(352)); len(st) != 0 {
		t.Fatalf("an unknown site's pilots %+v", st)
	}
}

func TestAnOlderEpochsReportNeverReplacesANewerOne(t *testing.T) {
	r := NewRegistry(DefaultConfig())
	r.Master("a", MasterReport{Epoch: 2, MinNodes: 5}, t0)
	r.Master("a", MasterReport{Epoch: 1, MinNodes: 9}, sec(1))
	if p := r.Plan(PlanInput{Now: sec(2)})[0]; p.Recommended != 5 {
		t.Fatalf("recommendation %d, want epoch 2's 5", p.Recommended)
	}
}

func TestAllowanceMatchesThePlan(t *testing.T) {
	r := twoSites(100, 100, 16, 16)
	speeds(r, 10, 30)
	plans := byName(r.Plan(PlanInput{Now: sec(1), Pending: 90}))
	for _, n := range []string{"a", "b"} {
		got, limited := r.Allowance(n, sec(1))
		if !limited || got != plans[n].Allowance {
			t.Fatalf("Allowance(%s) = %d %v, plan says %d", n, got, limited, plans[n].Allowance)
		}
	}
	// Alone (b silent), a is not limited.
	r.Seen("a", sec(100))
	if _, limited := r.Allowance("a", sec(100)); limited {
		t.Fatal("the only live site is limited")
	}
	if n, limited := r.Allowance("b", sec(100)); !limited || n != 0 {
		t.Fatalf("silent b may hold %d %v", n, limited)
	}
	if n, limited := r.Allowance("nobody", sec(100)); !limited || n != 0 {
		t.Fatalf("an unknown site may hold %d %v", n, limited)
	}
}
