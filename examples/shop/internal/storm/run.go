package storm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// op is one request of a burst, with what it means for the expected balance.
type op struct {
	acct   int // index in the storm accounts; -1 for the pay phase
	amount int64
	order  string // refunds: the order
	send   func(ctx context.Context) answer
	ans    answer
}

// storm holds the state of one Run.
type storm struct {
	cfg      Config
	api      api
	done     int
	total    int
	progress sync.Mutex
}

// Run drives the shop at cfg.BaseURL and reports what happened. It fails only when the
// shop cannot be set up or read (a setup request or a final read answering unexpectedly);
// misbehaviour under load is reported in the Report, not as an error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	own := cfg.Client == nil
	cfg = cfg.withDefaults()
	if own {
		defer cfg.Client.CloseIdleConnections()
	}
	s := &storm{cfg: cfg, api: api{base: cfg.BaseURL, c: cfg.Client}}
	s.total = cfg.Pays + cfg.PayKeys + cfg.Withdrawals + cfg.Accounts*cfg.RefundOrders*cfg.RefundCopies
	start := time.Now()
	r := &Report{Config: cfg}

	var health struct {
		Protected bool `json:"protected"`
	}
	if err := s.api.expect(ctx, "GET", "/healthz", nil, nil, http.StatusOK, &health); err != nil {
		return nil, err
	}
	r.Protected = health.Protected

	// Set-up, one request at a time: the paying account and its order, then the storm
	// accounts, each with RefundOrders paid orders to refund during the storm.
	payer, err := s.createAccount(ctx, "payer", payBalance)
	if err != nil {
		return nil, err
	}
	var payOrder order
	if err := s.api.expect(ctx, "POST", "/api/orders", map[string]any{"account_id": payer.ID, "amount": payAmount}, nil, http.StatusCreated, &payOrder); err != nil {
		return nil, err
	}
	accts := make([]account, cfg.Accounts)
	refundOrders := make([][]string, cfg.Accounts)
	for i := range accts {
		if accts[i], err = s.createAccount(ctx, fmt.Sprintf("storm-%d", i), stormBalance); err != nil {
			return nil, err
		}
		for range cfg.RefundOrders {
			var o order
			if err := s.api.expect(ctx, "POST", "/api/orders", map[string]any{"account_id": accts[i].ID, "amount": refundAmount}, nil, http.StatusCreated, &o); err != nil {
				return nil, err
			}
			if err := s.api.expect(ctx, "POST", "/api/orders/"+o.ID+"/pay", nil, map[string]string{"Idempotency-Key": "setup-" + o.ID}, http.StatusOK, nil); err != nil {
				return nil, err
			}
			refundOrders[i] = append(refundOrders[i], o.ID)
		}
	}

	before, err := s.queue(ctx) // a shared Redis may hold archived tasks of earlier runs
	if err != nil {
		return nil, err
	}

	// Burst 1: duplicate pays of one order, PayKeys keys shared round-robin.
	pays := make([]*op, cfg.Pays)
	for i := range pays {
		key := fmt.Sprintf("pay-%s-%d", payOrder.ID, i%cfg.PayKeys)
		pays[i] = &op{acct: -1, send: func(ctx context.Context) answer {
			return s.api.do(ctx, "POST", "/api/orders/"+payOrder.ID+"/pay", nil, map[string]string{"Idempotency-Key": key})
		}}
	}
	s.burst(ctx, pays)
	// Then each key's client retries once, as one whose answer got lost would: the burst is
	// over, so the protected shop replays the stored answer.
	retries := make([]*op, cfg.PayKeys)
	for i := range retries {
		key := fmt.Sprintf("pay-%s-%d", payOrder.ID, i)
		retries[i] = &op{acct: -1, send: func(ctx context.Context) answer {
			return s.api.do(ctx, "POST", "/api/orders/"+payOrder.ID+"/pay", nil, map[string]string{"Idempotency-Key": key})
		}}
		s.burst(ctx, retries[i:i+1])
	}

	// Burst 2: withdrawals over the accounts mixed with refund requests, in a shuffled order.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5709))
	var mixed, withdrawals, refunds []*op
	for i := range cfg.Withdrawals {
		acct, amount := i%cfg.Accounts, int64(minWithdrawal+rng.IntN(maxWithdrawal-minWithdrawal+1))
		id := accts[acct].ID
		o := &op{acct: acct, amount: amount, send: func(ctx context.Context) answer {
			return s.api.do(ctx, "POST", "/api/accounts/"+id+"/withdraw", map[string]any{"amount": amount}, nil)
		}}
		withdrawals = append(withdrawals, o)
	}
	for acct, ids := range refundOrders {
		for _, id := range ids {
			for range cfg.RefundCopies {
				o := &op{acct: acct, amount: refundAmount, order: id, send: func(ctx context.Context) answer {
					return s.api.do(ctx, "POST", "/api/orders/"+id+"/refund", nil, nil)
				}}
				refunds = append(refunds, o)
			}
		}
	}
	mixed = append(append(mixed, withdrawals...), refunds...)
	rng.Shuffle(len(mixed), func(i, j int) { mixed[i], mixed[j] = mixed[j], mixed[i] })
	s.burst(ctx, mixed)

	archived, err := s.drain(ctx)
	if err != nil {
		return nil, err
	}
	r.Archived = archived - before.Archived
	r.Elapsed = time.Since(start)
	return r, s.measure(ctx, r, payer, payOrder, accts, pays, retries, withdrawals, refunds)
}

// createAccount opens an account with balance.
func (s *storm) createAccount(ctx context.Context, owner string, balance int64) (account, error) {
	var a account
	err := s.api.expect(ctx, "POST", "/api/accounts", map[string]any{"owner": owner, "balance": balance}, nil, http.StatusCreated, &a)
	return a, err
}

// burst sends every op at once: all goroutines wait on one start signal, so the requests
// reach the shop together, as a double-click or a retrying client makes them.
func (s *storm) burst(ctx context.Context, ops []*op) {
	var ready, finished sync.WaitGroup
	start := make(chan struct{})
	for _, o := range ops {
		ready.Add(1)
		finished.Go(func() {
			ready.Done()
			<-start
			o.ans = o.send(ctx)
			s.progress.Lock()
			s.done++
			if s.cfg.Progress != nil {
				s.cfg.Progress(s.done, s.total)
			}
			s.progress.Unlock()
		})
	}
	ready.Wait()
	close(start)
	finished.Wait()
}

// queue reads the shop's refund queue counts.
func (s *storm) queue(ctx context.Context) (queueInfo, error) {
	var q queueInfo
	err := s.api.expect(ctx, "GET", "/api/queue", nil, nil, http.StatusOK, &q)
	return q, err
}

// drain waits until the shop's refund queue has nothing pending, running or scheduled,
// and returns the number of archived tasks (tasks the worker gave up on).
func (s *storm) drain(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		q, err := s.queue(ctx)
		if err == nil && q.Pending+q.Active+q.Scheduled+q.Retry == 0 {
			return q.Archived, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("storm: refund queue did not drain in %v (last: %+v, %v)", s.cfg.DrainTimeout, q, err)
		case <-tick.C:
		}
	}
}
