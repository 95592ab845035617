package siteshare

import (
	"math"
	"testing"
	"time"
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
