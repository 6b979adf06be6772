package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
)

// An Acquire that obtains the lock while Close runs answers ErrClosed, or returns a lock the
// watchdog took in before it stopped (and which Close then ends as lost, like every lock
// held at Close): never a lock that nothing watched, ended before anyone saw it. Each round
// races one acquisition against Close on a fresh Client over a store that answers at once,
// so the two meet at every point of the acquisition.
func TestAcquireRacingCloseIsWatchedOrClosed(t *testing.T) {
	var closed, watched int
	for i := range 3000 {
		cfg := config{lease: DefaultLease, retry: DefaultRetryInterval, prefix: DefaultPrefix}
		c := &Client{cfg: cfg, log: slog.New(slog.DiscardHandler), closing: make(chan struct{})}
		c.be = nopBackend{}
		c.tel = newTelemetry(&cfg)
		c.wd = newWatchdog(c)
		var wg sync.WaitGroup
		var lk *Lock
		var err error
		wg.Add(2)
		go func() {
			defer wg.Done()
			lk, err = c.Acquire(context.Background(), "k")
		}()
		go func() {
			defer wg.Done()
			spin(i % 400) // Close starts at a different point of the acquisition each round
			_ = c.Close()
		}()
		wg.Wait()
		switch {
		case errors.Is(err, ErrClosed):
			closed++
		case err != nil:
			t.Fatalf("Acquire racing Close: %v", err)
		case lk.l.watcher() == nil:
			t.Fatalf("Acquire racing Close returned a lock the watchdog never took in (Err %v)", lk.Err())
		default:
			watched++
			<-lk.Done() // Close ends every lock it finds watched
		}
	}
	t.Logf("ErrClosed %d times, a watched lock %d times", closed, watched)
}

// spin busy-waits for about n short steps.
func spin(n int) {
	x := 0
	for j := range n * 20 {
		x += j
	}
	spinSink = x
}

var spinSink int
