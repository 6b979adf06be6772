package dlock

// CloseBegun reports whether Close has begun on c: from then on the Client counts as closed
// (a wait whose look fails sends no probe). For the tests of package dlock_test, which cannot
// see it otherwise.
func CloseBegun(c *Client) bool { return c.closed.Load() }
