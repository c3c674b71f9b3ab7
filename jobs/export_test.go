package jobs

import "github.com/jackc/pgx/v5"

// WaitListens is how many LISTEN connections c's Wait registry opened.
func WaitListens(c *Client) int64 { return c.waits.listens.Load() }

// WaitChecks is how many re-read statements c's Wait registry ran.
func WaitChecks(c *Client) int64 { return c.waits.checks.Load() }

// Waiters is how many waiters c's registry holds.
func Waiters(c *Client) int {
	c.waits.mu.Lock()
	defer c.waits.mu.Unlock()
	n := 0
	for _, ws := range c.waits.waiters {
		n += len(ws)
	}
	return n
}

// SetWaitConnHook calls f with every LISTEN connection c's registry opens (before any Wait).
func SetWaitConnHook(c *Client, f func(*pgx.Conn)) { c.waits.connHook = f }

// SetInsertAndWaitHook calls f in InsertAndWait between the insert and the wait.
func SetInsertAndWaitHook(c *Client, f func(id int64)) { c.waits.afterInsert = f }
