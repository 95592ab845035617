package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
)

// failoverOutcome is what the failover scenario showed.
type failoverOutcome struct {
	first, second outcome // the job submitted through a, and the one through b after a's death
	// killedAt is when agent a was killed; doneAt the tasks each site
	// finished before and after it (from the tasks' ledger).
	killedAt     time.Time
	before, past map[string]int
	// bStopped counts the samples after a's death when b had no running
	// pilot while the first job was not final.
	bStopped int
}

// failover runs the several-agents scenario: both sites' agents serve one
// database; carol submits through a's agent; once both sites have finished
// some tasks, a's agent is killed with SIGKILL; b's pilots go on, a's
// pilots go on through b's agent (their URL list), and carol submits a
// second job and watches both through b.
func failover(ctx context.Context, s *setup, n int, work string) (failoverOutcome, error) {
	var f failoverOutcome
	for _, l := range s.labs {
		l.clean()
	}
	logf("%s: starting two agents on one database", s.work)
	if err := s.start(ctx); err != nil {
		s.stop()
		return f, err
	}
	defer s.stop()
	ds, err := s.dataset("ds", n)
	if err != nil {
		return f, err
	}
	t1 := time.Now()
	id, ledger, err := s.submit(ctx, ds, work)
	if err != nil {
		return f, err
	}
	pilots := map[string][]int{}
	logf("job %d of %d tasks submitted through a's agent", id, n)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		done, err := ledgerEnds(ledger, time.Time{})
		if err == nil && done["a"] >= 3 && done["b"] >= 3 {
			break
		}
		for _, l := range s.labs {
			pilots[l.site] = append(pilots[l.site], l.pilots())
		}
		if time.Now().After(deadline) {
			return f, fmt.Errorf("both sites did not finish 3 tasks within 3 minutes (ledger %v)", done)
		}
		if j, err := s.job(ctx, id); err == nil && api.JobFinal(j.State) {
			return f, fmt.Errorf("job %d was %s before both sites finished 3 tasks (ledger %v)", id, j.State, done)
		}
		time.Sleep(time.Second)
	}
	f.killedAt = time.Now()
	if err := s.agents[0].Process.Kill(); err != nil {
		return f, fmt.Errorf("kill agent a: %w", err)
	}
	s.agents[0].Wait()
	s.via = 1 // from now on the CLI talks to b's agent
	logf("agent a killed (SIGKILL); the CLI now uses b's agent")
	ds2, err := s.dataset("ds2", n/4)
	if err != nil {
		return f, err
	}
	t2 := time.Now()
	id2, ledger2, err := s.submit(ctx, ds2, work)
	if err != nil {
		return f, fmt.Errorf("submit through b after a's death: %w", err)
	}
	logf("job %d of %d tasks submitted through b's agent", id2, n/4)
	start := time.Now()
	var end1, end2 time.Time
	for {
		if time.Since(start) > 10*time.Minute {
			return f, fmt.Errorf("jobs %d and %d not final 10 minutes after a's death", id, id2)
		}
		j, err := s.job(ctx, id)
		if err != nil {
			return f, fmt.Errorf("watch job %d through b: %w", id, err)
		}
		for _, l := range s.labs {
			pilots[l.site] = append(pilots[l.site], l.pilots())
		}
		if !api.JobFinal(j.State) && pilots["b"][len(pilots["b"])-1] == 0 {
			f.bStopped++
		}
		j2, err := s.job(ctx, id2)
		if err != nil {
			return f, fmt.Errorf("watch job %d through b: %w", id2, err)
		}
		if api.JobFinal(j.State) && end1.IsZero() {
			end1 = time.Now()
		}
		if api.JobFinal(j2.State) && end2.IsZero() {
			end2 = time.Now()
		}
		if !end1.IsZero() && !end2.IsZero() {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if f.first, err = s.wait(ctx, id, n, ledger, time.Minute); err != nil {
		return f, err
	}
	if f.second, err = s.wait(ctx, id2, n/4, ledger2, time.Minute); err != nil {
		return f, err
	}
	// The pilots running at each cluster, before and after a's death.
	f.first.makespan, f.second.makespan = end1.Sub(t1), end2.Sub(t2)
	f.first.pilots, f.second.pilots = pilots, nil
	if f.before, err = ledgerEnds(ledger, time.Time{}); err != nil {
		return f, err
	}
	if f.past, err = ledgerEnds(ledger, f.killedAt); err != nil {
		return f, err
	}
	for site, k := range f.past {
		f.before[site] -= k
	}
	return f, nil
}

// ledgerEnds counts per site the runs in a ledger that ended after since.
func ledgerEnds(path string, since time.Time) (map[string]int, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fs := strings.Fields(sc.Text()) // TASK site:SITE START END
		if len(fs) != 4 {
			continue
		}
		end, err := strconv.ParseFloat(fs[3], 64)
		if err != nil {
			continue
		}
		if since.IsZero() || float64(since.UnixNano())/1e9 < end {
			out[strings.TrimPrefix(fs[1], "site:")]++
		}
	}
	return out, sc.Err()
}

func describeFailover(f failoverOutcome, n int) string {
	return fmt.Sprintf("job through a: %s; done before a's death %v, after %v; b without a pilot in %d samples | job through b after: %s",
		describe(f.first, n), f.before, f.past, f.bStopped, describe(f.second, n/4))
}
