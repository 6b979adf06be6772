package shop_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/internal/redistest"
)

// TestRefundOfAnotherAccountIsArchived enqueues a refund task whose payload names an account
// other than the order's. The protected worker locks the account the payload names, so
// applying it would move money on an account it does not hold: the task is archived and
// neither balance changes.
func TestRefundOfAnotherAccountIsArchived(t *testing.T) {
	modes(t, func(t *testing.T, protected bool) {
		srv := redistest.Start(t)
		e := newEnvOn(t, srv, protected, time.Millisecond)
		alice, bob := e.account("alice", 10_000), e.account("bob", 10_000)
		o := e.order(alice.ID, 2_500)
		e.must(http.StatusOK, nil, "POST", "/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "pay-1")

		payload, err := json.Marshal(shop.RefundPayload{OrderID: o.ID, AccountID: bob.ID, Amount: o.Amount})
		if err != nil {
			t.Fatal(err)
		}
		client := asynq.NewClientFromRedisClient(srv.Client(t))
		if _, err := client.Enqueue(asynq.NewTask(shop.TaskRefund, payload), asynq.Queue("refunds"), asynq.MaxRetry(10)); err != nil {
			t.Fatal(err)
		}
		inspector := asynq.NewInspectorFromRedisClient(srv.Client(t))
		var (
			archived []*asynq.TaskInfo
			got      shop.Order
		)
		eventually(t, 10*time.Second, "the refund task to be archived or applied", func() bool {
			archived, err = inspector.ListArchivedTasks("refunds")
			e.must(http.StatusOK, &got, "GET", "/api/orders/"+o.ID, "")
			return err == nil && len(archived) == 1 || got.Status != shop.StatusPaid
		})
		if got.Status != shop.StatusPaid {
			t.Errorf("order status %q, want %q", got.Status, shop.StatusPaid)
		}
		if len(archived) != 1 {
			t.Errorf("%d archived tasks, want 1", len(archived))
		} else if a := archived[0]; a.Retried != 0 || !strings.Contains(a.LastErr, "payload names account") {
			t.Errorf("archived after %d retries with %q; want at once, naming the account mismatch", a.Retried, a.LastErr)
		}
		for _, acc := range []struct {
			id   string
			want int64
		}{{alice.ID, 7_500}, {bob.ID, 10_000}} {
			var a shop.Account
			e.must(http.StatusOK, &a, "GET", "/api/accounts/"+acc.id, "")
			if a.Balance != acc.want {
				t.Errorf("account %s balance %d, want %d", acc.id, a.Balance, acc.want)
			}
		}
	})
}
