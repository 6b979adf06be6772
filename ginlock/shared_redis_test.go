package ginlock_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
)

// The replay scope ginlock adds is method and route, nothing of the service: two services
// on one Redis that both serve POST /payments, with the same user ids, share stored
// responses (the second gets the first's answer replayed) unless their dlock Clients have
// prefixes of their own (dlock.WithPrefix).
func TestServicesSharingRedisNeedTheirOwnPrefix(t *testing.T) {
	e := setup(t)
	service := func(name string, locks *dlock.Client) *gin.Engine {
		r := router()
		r.POST("/payments", ginlock.New(locks, payKey), func(c *gin.Context) {
			c.String(http.StatusCreated, name)
		})
		return r
	}
	for _, tc := range []struct {
		name   string
		opts   []dlock.Option
		second string // what the second service answers
	}{
		{"same prefix", nil, "orders"},
		{"own prefix", []dlock.Option{dlock.WithPrefix("billing")}, "billing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			billingLocks := dlock.New(e.rdb, tc.opts...)
			t.Cleanup(func() { _ = billingLocks.Close() })
			orders, billing := service("orders", e.locks), service("billing", billingLocks)
			q := req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)}
			if w := do(orders, q); w.Code != http.StatusCreated || w.Body.String() != "orders" {
				t.Fatalf("orders: %d %q", w.Code, w.Body)
			}
			if w := do(billing, q); w.Code != http.StatusCreated || w.Body.String() != tc.second {
				t.Fatalf("billing, same user and key: %d %q (replayed %q), want %q", w.Code, w.Body,
					w.Header().Get(ginlock.ReplayedHeader), tc.second)
			}
		})
	}
}
