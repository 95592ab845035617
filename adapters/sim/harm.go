package sim

// Pilot harm: how long each foreign job waited while the pilots were in
// its way. Comparing a harvest run with a baseline run job by job mostly
// measures chaos (a different start anywhere shifts everything after it);
// this is measured inside one run instead. After every scheduling pass the
// same pass is run again with the pilots removed (their nodes free, their
// reservations gone, queued pilots out of the queue). A foreign job that
// this pass would start but the real one did not is charged from now until
// the next pass, or until it would no longer fit without delaying a
// reservation (its backfill window closes), whichever is first. Between
// passes nothing changes but time, and time only closes windows, so the
// charge is what the scheduler's own test would have said at every
// instant it ran. With no pilot in the cluster nothing is charged (and no
// second pass runs): a baseline run has no harm by construction.

// closeCharges ends every open charge at the current time.
func (c *Cluster) closeCharges() {
	for _, j := range c.charged {
		j.rec.Blocked += min(c.now, j.chargeUntil) - j.chargeFrom
	}
	clear(c.charged)
	c.charged = c.charged[:0]
}

// chargePilots runs the scheduling pass again without pilots and opens a
// charge for every pending foreign job it would start.
func (c *Cluster) chargePilots() {
	if c.idlePilots+c.busyPilots == 0 && c.queuedPilots == 0 {
		return
	}
	free := c.idleCores() + c.pilotCores
	var p *profile
	reserved := 0
	for _, j := range c.pending {
		if j.state != stPending || j.pilot {
			continue
		}
		if j.cores > free && reserved >= c.cfg.Reservations {
			continue
		}
		if p == nil {
			c.fillProfile(&c.cfProf, false)
			p = &c.cfProf
		}
		s := p.earliest(j.cores, j.limit)
		if s == c.now && j.cores <= free {
			// The latest start that still fits: the window closes when
			// the job would run into too few free nodes.
			until := p.firstShort(j.cores)
			if until != never {
				until = max(c.now, until-j.limit)
			}
			j.chargeFrom, j.chargeUntil = c.now, until
			c.charged = append(c.charged, j)
			p.reserve(s, j.limit, j.cores)
			free -= j.cores
			continue
		}
		if reserved < c.cfg.Reservations && s != never {
			p.reserve(s, j.limit, j.cores)
			reserved++
		}
	}
}
