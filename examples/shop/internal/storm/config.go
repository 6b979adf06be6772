package storm

import (
	"net/http"
	"time"
)

// Config sizes a storm. Zero fields take the defaults of `make demo`.
type Config struct {
	// BaseURL of the shop, e.g. "http://127.0.0.1:8080". Required.
	BaseURL string
	// Pays is the number of concurrent pays of one order. Default 50.
	Pays int
	// PayKeys is the number of distinct Idempotency-Keys among them. Default 5.
	PayKeys int
	// Accounts is the number of accounts the withdrawals are spread over. Default 4.
	Accounts int
	// Withdrawals is the number of concurrent withdrawals. Default 200.
	Withdrawals int
	// RefundOrders is the number of orders per account paid before the storm and refunded
	// during it. Default 3.
	RefundOrders int
	// RefundCopies is how many times each refund is requested. Default 2.
	RefundCopies int
	// Seed makes the withdrawal amounts reproducible. Default 1.
	Seed uint64
	// DrainTimeout bounds the wait for the shop's refund worker to finish. Default 60 s.
	DrainTimeout time.Duration
	// Client sends the requests. Default: a client with enough idle connections for the
	// storm and a 30 s timeout.
	Client *http.Client
	// Progress, if set, is called after every storm request with the number done and
	// the total, from the requests' goroutines (one at a time).
	Progress func(done, total int)
}

// Opening balances and amounts, in cents.
const (
	payBalance    = 10_000
	payAmount     = 2_500
	stormBalance  = 1_000_000
	refundAmount  = 1_000
	minWithdrawal = 100
	maxWithdrawal = 999
)

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Pays, 50)
	def(&c.PayKeys, 5)
	def(&c.Accounts, 4)
	def(&c.Withdrawals, 200)
	def(&c.RefundOrders, 3)
	def(&c.RefundCopies, 2)
	if c.PayKeys > c.Pays {
		c.PayKeys = c.Pays
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 60 * time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxIdleConns: 512},
		}
	}
	return c
}
