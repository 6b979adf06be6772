package shop

import (
	"context"
	"math/rand/v2"
	"time"
)

// Provider simulates a slow external payment provider: every call takes a random time
// between Min and Max. That latency is the window in which concurrent requests read the
// same balance; it is what makes the unprotected shop lose updates.
type Provider struct {
	Min, Max time.Duration
}

// DefaultProvider takes 20-50 ms per call, like a fast real provider.
var DefaultProvider = Provider{Min: 20 * time.Millisecond, Max: 50 * time.Millisecond}

// Call waits for the simulated provider, or returns ctx's error if ctx ends first.
func (p Provider) Call(ctx context.Context) error {
	d := p.Min
	if p.Max > p.Min {
		d += rand.N(p.Max - p.Min) // jitter, not a secret: math/rand is fine
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
