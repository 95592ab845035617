package core

// PoolSize is poolSize (cached); CountPool counts it afresh.
func (c *Core) PoolSize() int  { return c.poolSize() }
func (c *Core) CountPool() int { n, _ := c.countPool(); return n }
