package worker

import (
	"fmt"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/internal/unixacct"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// ownerMayRead checks, when t starts, that t's owner's Unix account may
// read real, what t's input (a link, or beneath one) leads to now. The
// queue checked the same at submission (queue.mayRead), but the worker
// resolves the entry only now and reads it with the harvest account,
// which reads every user's data: a link re-pointed since (or a plain
// entry replaced by a link) to another user's private file would be
// handed to the owner's command. Checking the submitter's rights again
// holds whatever changed, needs nothing recorded at submission, and
// costs a stat per directory of the target's path, for linked entries
// only. An owner without a Unix account here is trusted, as at
// submission (only an admin makes a token for one).
func (r *ExecRunner) ownerMayRead(t pilotproto.Task, real string) error {
	a, err := r.accounts.lookup(r.LookupAccount, t.Owner, time.Now())
	if err != nil {
		return nil
	}
	if err := a.MayRead(real); err != nil {
		return fmt.Errorf("dataset entry %s now leads to %s: the account of %s %v", t.Input, real, t.Owner, err)
	}
	return nil
}

// accountCache remembers owners' accounts for a minute: one look-up in
// the user database (NSS, LDAP) per owner, not per task.
type accountCache struct {
	mu sync.Mutex
	m  map[string]cachedAccount
}

type cachedAccount struct {
	a   unixacct.Account
	err error
	at  time.Time
}

const accountTTL = time.Minute

func (c *accountCache) lookup(find func(string) (unixacct.Account, error), name string, now time.Time) (unixacct.Account, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[name]; ok && now.Sub(e.at) < accountTTL {
		return e.a, e.err
	}
	if find == nil {
		find = unixacct.Lookup
	}
	a, err := find(name)
	if c.m == nil || len(c.m) > 1024 {
		c.m = map[string]cachedAccount{}
	}
	c.m[name] = cachedAccount{a, err, now}
	return a, err
}
