package shop_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
)

// TestContract checks every status of the HTTP contract that a single request can
// produce, in both modes.
func TestContract(t *testing.T) {
	modes(t, func(t *testing.T, protected bool) {
		e := newEnv(t, protected, time.Millisecond)
		rich := e.account("alice", 10_000)
		poor := e.account("bob", 100)
		pending := e.order(rich.ID, 2_500)
		tooDear := e.order(poor.ID, 2_500)
		key := []string{"Idempotency-Key", "k-1"}

		cases := []struct {
			name, method, path, body string
			header                   []string
			want                     int
			contains                 string
		}{
			{"create account", "POST", "/api/accounts", `{"owner":"carol","balance":500}`, nil, 201, `"balance":500`},
			{"create account, zero balance", "POST", "/api/accounts", `{"owner":"dan","balance":0}`, nil, 201, `"owner":"dan"`},
			{"create account, bad JSON", "POST", "/api/accounts", `{"owner":`, nil, 400, "bad_json"},
			{"create account, wrong type", "POST", "/api/accounts", `{"owner":"x","balance":"lots"}`, nil, 400, "bad_json"},
			{"create account, fractional cents", "POST", "/api/accounts", `{"owner":"x","balance":1.5}`, nil, 400, "bad_json"},
			{"create account, no owner", "POST", "/api/accounts", `{"balance":5}`, nil, 400, "invalid_owner"},
			{"create account, blank owner", "POST", "/api/accounts", `{"owner":" \t ","balance":5}`, nil, 400, "invalid_owner"},
			{"create account, trailing data", "POST", "/api/accounts", `{"owner":"x","balance":5} {"owner":"y"}`, nil, 400, "bad_json"},
			{"create account, trailing garbage", "POST", "/api/accounts", `{"owner":"x","balance":5}]`, nil, 400, "bad_json"},
			{"create account, negative balance", "POST", "/api/accounts", `{"owner":"x","balance":-1}`, nil, 400, "invalid_balance"},
			{"get account", "GET", "/api/accounts/" + rich.ID, "", nil, 200, `"balance":10000`},
			{"get account, unknown", "GET", "/api/accounts/acc_nope", "", nil, 404, "account_not_found"},

			{"create order", "POST", "/api/orders", `{"account_id":"` + rich.ID + `","amount":100}`, nil, 201, `"status":"pending"`},
			{"create order, bad JSON", "POST", "/api/orders", `not json`, nil, 400, "bad_json"},
			{"create order, zero amount", "POST", "/api/orders", `{"account_id":"` + rich.ID + `","amount":0}`, nil, 400, "invalid_amount"},
			{"create order, negative amount", "POST", "/api/orders", `{"account_id":"` + rich.ID + `","amount":-5}`, nil, 400, "invalid_amount"},
			{"create order, unknown account", "POST", "/api/orders", `{"account_id":"acc_nope","amount":100}`, nil, 404, "account_not_found"},
			{"get order", "GET", "/api/orders/" + pending.ID, "", nil, 200, `"status":"pending"`},
			{"get order, unknown", "GET", "/api/orders/ord_nope", "", nil, 404, "order_not_found"},

			{"withdraw, bad JSON", "POST", "/api/accounts/" + rich.ID + "/withdraw", `{`, nil, 400, "bad_json"},
			{"withdraw, two amounts", "POST", "/api/accounts/" + rich.ID + "/withdraw", `{"amount":1}{"amount":5000}`, nil, 400, "bad_json"},
			{"withdraw, zero", "POST", "/api/accounts/" + rich.ID + "/withdraw", `{"amount":0}`, nil, 400, "invalid_amount"},
			{"withdraw, negative", "POST", "/api/accounts/" + rich.ID + "/withdraw", `{"amount":-100}`, nil, 400, "invalid_amount"},
			{"withdraw, unknown account", "POST", "/api/accounts/acc_nope/withdraw", `{"amount":100}`, nil, 404, "account_not_found"},
			{"withdraw, account id too long for a lock key", "POST", "/api/accounts/" + strings.Repeat("a", 1100) + "/withdraw", `{"amount":100}`, nil, 404, "account_not_found"},
			{"withdraw, insufficient funds", "POST", "/api/accounts/" + poor.ID + "/withdraw", `{"amount":101}`, nil, 402, "insufficient_funds"},
			{"withdraw", "POST", "/api/accounts/" + rich.ID + "/withdraw", `{"amount":100}`, nil, 200, `{"balance":9900}`},

			{"pay, no Idempotency-Key", "POST", "/api/orders/" + pending.ID + "/pay", "", nil, 400, "missing_idempotency_key"},
			{"pay, blank Idempotency-Key", "POST", "/api/orders/" + pending.ID + "/pay", "", []string{"Idempotency-Key", " "}, 400, "missing_idempotency_key"},
			{"pay, unknown order", "POST", "/api/orders/ord_nope/pay", "", key, 404, "order_not_found"},
			{"pay, insufficient funds", "POST", "/api/orders/" + tooDear.ID + "/pay", "", key, 402, "insufficient_funds"},

			{"refund, unknown order", "POST", "/api/orders/ord_nope/refund", "", nil, 404, "order_not_found"},
			{"refund, unpaid order", "POST", "/api/orders/" + pending.ID + "/refund", "", nil, 409, "not_paid"},

			{"ledger", "GET", "/api/accounts/" + rich.ID + "/ledger", "", nil, 200, `"kind":"withdraw"`},
			{"ledger, empty", "GET", "/api/accounts/" + poor.ID + "/ledger", "", nil, 200, `[]`},
			{"ledger, unknown account", "GET", "/api/accounts/acc_nope/ledger", "", nil, 404, "account_not_found"},
			{"healthz", "GET", "/healthz", "", nil, 200, `"status":"ok"`},
			{"page", "GET", "/", "", nil, 200, `id="pay"`},

			{"unknown route", "GET", "/api/nope", "", nil, 404, `{"error":"not_found"}`},
			{"pay, wrong method", "GET", "/api/orders/" + pending.ID + "/pay", "", nil, 405, `{"error":"method_not_allowed"}`},
			{"account, wrong method", "DELETE", "/api/accounts/" + rich.ID, "", nil, 405, `{"error":"method_not_allowed"}`},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				w := e.do(c.method, c.path, c.body, c.header...)
				if w.Code != c.want || !strings.Contains(w.Body.String(), c.contains) {
					t.Errorf("%s %s: %d %s, want %d containing %q", c.method, c.path, w.Code, w.Body, c.want, c.contains)
				}
			})
		}
		if allow := e.do("GET", "/api/orders/"+pending.ID+"/pay", "").Header().Get("Allow"); allow != "POST" {
			t.Errorf("GET of the pay route: Allow %q, want POST", allow)
		}
	})
}

// TestPayRefundLifecycle walks one order through pay, a second pay, refund and a second
// refund, and checks the ledger and balance after each.
func TestPayRefundLifecycle(t *testing.T) {
	modes(t, func(t *testing.T, protected bool) {
		e := newEnv(t, protected, time.Millisecond)
		a := e.account("alice", 10_000)
		o := e.order(a.ID, 2_500)
		pay := "/api/orders/" + o.ID + "/pay"

		var paid struct {
			OrderID string `json:"order_id"`
			Status  string `json:"status"`
			Balance int64  `json:"balance"`
		}
		e.must(http.StatusOK, &paid, "POST", pay, "", "Idempotency-Key", "first")
		if paid.OrderID != o.ID || paid.Status != "paid" || paid.Balance != 7_500 {
			t.Fatalf("pay answered %+v", paid)
		}
		if w := e.do("POST", pay, "", "Idempotency-Key", "second"); w.Code != 409 || !strings.Contains(w.Body.String(), `{"error":"already_paid"}`) {
			t.Fatalf("pay with a new key: %d %s, want 409 already_paid", w.Code, w.Body)
		}

		e.must(http.StatusAccepted, nil, "POST", "/api/orders/"+o.ID+"/refund", "")
		eventually(t, 10*time.Second, "the refund to be applied", func() bool {
			var got shop.Order
			e.must(http.StatusOK, &got, "GET", "/api/orders/"+o.ID, "")
			return got.Status == shop.StatusRefunded
		})
		if w := e.do("POST", "/api/orders/"+o.ID+"/refund", ""); w.Code != 409 || !strings.Contains(w.Body.String(), "already_refunded") {
			t.Fatalf("second refund: %d %s, want 409 already_refunded", w.Code, w.Body)
		}
		if w := e.do("POST", pay, "", "Idempotency-Key", "third"); w.Code != 409 {
			t.Fatalf("pay of a refunded order: %d %s, want 409", w.Code, w.Body)
		}

		var acc shop.Account
		e.must(http.StatusOK, &acc, "GET", "/api/accounts/"+a.ID, "")
		l := e.ledger(a.ID)
		if acc.Balance != 10_000 || len(l) != 2 || l[0].Kind != shop.KindCharge || l[1].Kind != shop.KindRefund {
			t.Fatalf("after pay and refund: balance %d, ledger %+v", acc.Balance, l)
		}
		for _, en := range l {
			if en.OrderID != o.ID || en.Amount != 2_500 || en.At.IsZero() {
				t.Errorf("ledger entry %+v", en)
			}
		}
	})
}

// TestPayReplay: protected, a retry with the same key after the first pay completed gets
// the stored answer back, marked replayed, without a second charge.
func TestPayReplay(t *testing.T) {
	e := newEnv(t, true, time.Millisecond)
	a := e.account("alice", 10_000)
	o := e.order(a.ID, 2_500)
	first := e.do("POST", "/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", `"retry-me"`)
	again := e.do("POST", "/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "retry-me")
	if first.Code != 200 || again.Code != 200 || again.Body.String() != first.Body.String() {
		t.Fatalf("first %d %s, retry %d %s: want the same 200", first.Code, first.Body, again.Code, again.Body)
	}
	if again.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry not marked Idempotent-Replayed")
	}
	if l := e.ledger(a.ID); len(l) != 1 {
		t.Errorf("ledger %+v, want one charge", l)
	}
}

// TestPayKeyReusedOnAnotherOrder: protected, an Idempotency-Key that paid one order and is
// sent again to pay another is the same key with another request: 422, nothing charged.
func TestPayKeyReusedOnAnotherOrder(t *testing.T) {
	e := newEnv(t, true, time.Millisecond)
	a := e.account("alice", 10_000)
	o1, o2 := e.order(a.ID, 2_500), e.order(a.ID, 1_000)
	if w := e.do("POST", "/api/orders/"+o1.ID+"/pay", "", "Idempotency-Key", "k1"); w.Code != 200 {
		t.Fatalf("first pay: %d %s", w.Code, w.Body)
	}
	w := e.do("POST", "/api/orders/"+o2.ID+"/pay", "", "Idempotency-Key", "k1")
	if w.Code != 422 {
		t.Fatalf("k1 again on another order: %d %s, want 422", w.Code, w.Body)
	}
	if l := e.ledger(a.ID); len(l) != 1 {
		t.Errorf("ledger %+v, want the first order's charge only", l)
	}
	if w := e.do("POST", "/api/orders/"+o2.ID+"/pay", "", "Idempotency-Key", "k2"); w.Code != 200 {
		t.Errorf("the other order with a key of its own: %d %s, want 200", w.Code, w.Body)
	}
}

// TestConcurrentPays: protected, two concurrent pays with one key give 200 and 409
// (in flight); two with different keys give 200 and 409 already_paid, the second having
// waited for the first under the account lock. Either way one charge.
func TestConcurrentPays(t *testing.T) {
	e := newEnv(t, true, 100*time.Millisecond)
	for _, c := range []struct {
		name string
		keys [2]string
	}{
		{"same key", [2]string{"k", "k"}},
		{"different keys", [2]string{"k1", "k2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := e.account("alice", 10_000)
			o := e.order(a.ID, 2_500)
			var wg sync.WaitGroup
			codes := make([]int, 2)
			for i, k := range c.keys {
				wg.Go(func() {
					codes[i] = e.do("POST", "/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", k).Code
				})
			}
			wg.Wait()
			if min(codes[0], codes[1]) != 200 || max(codes[0], codes[1]) != 409 {
				t.Errorf("answers %v, want one 200 and one 409", codes)
			}
			if l := e.ledger(a.ID); len(l) != 1 {
				t.Errorf("ledger %+v, want one charge", l)
			}
		})
	}
}

// TestBodyOverCapIs413: a body over the shop's 64 KiB cap is 413 body_too_large on every
// route that reads one, in both modes, and changes nothing. It was 400 bad_json for a
// well-formed body (white space before the object) on the shop's routes, while the protected
// pay route let ginlock answer 413 problem+json above its own 1 MiB cap and the unprotected
// one charged.
func TestBodyOverCapIs413(t *testing.T) {
	modes(t, func(t *testing.T, protected bool) {
		e := newEnv(t, protected, time.Millisecond)
		a := e.account("alice", 10_000)
		o := e.order(a.ID, 2_500)
		pad := strings.Repeat(" ", 64<<10)
		for _, c := range []struct {
			name, path, body string
			header           []string
		}{
			{"create account", "/api/accounts", pad + `{"owner":"x","balance":5}`, nil},
			{"create order", "/api/orders", pad + `{"account_id":"` + a.ID + `","amount":100}`, nil},
			{"withdraw", "/api/accounts/" + a.ID + "/withdraw", pad + `{"amount":100}`, nil},
			{"pay", "/api/orders/" + o.ID + "/pay", pad + strings.Repeat(" ", 1<<20), []string{"Idempotency-Key", "k-big"}},
		} {
			w := e.do("POST", c.path, c.body, c.header...)
			if w.Code != http.StatusRequestEntityTooLarge || strings.TrimSpace(w.Body.String()) != `{"error":"body_too_large"}` {
				t.Errorf("%s with a body over 64 KiB: %d %s %s, want 413 {\"error\":\"body_too_large\"}",
					c.name, w.Code, w.Header().Get("Content-Type"), w.Body)
			}
		}
		var got shop.Account
		e.must(http.StatusOK, &got, "GET", "/api/accounts/"+a.ID, "")
		if l := e.ledger(a.ID); got.Balance != 10_000 || len(l) != 0 {
			t.Errorf("after the refused requests: balance %d, ledger %+v; want 10000 and nothing", got.Balance, l)
		}
	})
}
