package main

import (
	"context"
	"testing"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
)

// The contended configurations rotate the order of the contenders, as the report says: no
// contender runs first in two configurations in a row.
func TestContendedOrderRotates(t *testing.T) {
	srv, err := redistest.Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := t.Context()
	p := newPlan(true)
	p.contendedDur, p.curveDur = 30*time.Millisecond, 30*time.Millisecond
	b, err := newBench(ctx, srv, p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	rep := &report{plan: p}
	if err := b.contended(context.WithoutCancel(ctx), rep); err != nil {
		t.Fatal(err)
	}
	n := len(rep.contended) / 4 // configurations, four contenders each
	if n < 2 {
		t.Fatalf("%d configurations run", n)
	}
	for i := 1; i < n; i++ {
		prev, cur := rep.contended[4*(i-1)].name, rep.contended[4*i].name
		if prev == cur {
			t.Errorf("configurations %d and %d both ran %s first", i-1, i, cur)
		}
	}
}
