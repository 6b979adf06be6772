//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite" // read the shop's ledger file after the run

	"github.com/lockguard/lockguard/internal/redistest"
)

// payOutcome is what one retrying client ended with.
type payOutcome struct {
	final    string // "paid", "replayed", "already_paid", or "" when it gave up
	attempts int
	at       time.Time // when the final answer came
	err      string
}

// payStats counts the answers of all clients.
type payStats struct {
	attempts, transport, busy, unavailable, other atomic.Int64
}

// payUntilFinal pays an order with one Idempotency-Key, retrying the same request until the
// shop gives a final answer: 200 (fresh or replayed) or 409 already_paid.
func payUntilFinal(ctx context.Context, api *shopAPI, order, key string, st *payStats) payOutcome {
	var out payOutcome
	for ctx.Err() == nil {
		r := api.do(ctx, "POST", "/api/orders/"+order+"/pay", nil, map[string]string{"Idempotency-Key": key})
		out.attempts++
		st.attempts.Add(1)
		switch {
		case r.err != nil:
			st.transport.Add(1)
		case r.status == http.StatusOK && r.header.Get("Idempotent-Replayed") == "true":
			out.final, out.at = "replayed", time.Now()
			return out
		case r.status == http.StatusOK:
			out.final, out.at = "paid", time.Now()
			return out
		case r.status == http.StatusConflict && r.errorCode() == "already_paid":
			out.final, out.at = "already_paid", time.Now()
			return out
		case r.status == http.StatusConflict: // the key's request, or the account, is busy
			st.busy.Add(1)
		case r.status == http.StatusServiceUnavailable:
			st.unavailable.Add(1)
		default:
			st.other.Add(1)
			out.err = fmt.Sprintf("status %d: %s", r.status, r.body)
		}
		// A polite client: Retry-After when given (ginlock sends 1 s), else 100-200 ms.
		wait := time.Duration(100+rand.IntN(100)) * time.Millisecond
		if s, err := strconv.Atoi(r.header.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s)*time.Second + time.Duration(rand.IntN(200))*time.Millisecond
		}
		pause(ctx, wait)
	}
	return out
}

// Fault 10: the shop process is SIGKILLed twice in the middle of a pay storm and restarted on
// the same Redis and SQLite file. Every client retries its request with its Idempotency-Key
// until it gets a final answer. Every order must be charged exactly once, and every
// account's balance must match its ledger.
func TestFaultShopKilled(t *testing.T) {
	rs := redistest.Start(t)
	bin := buildShop(t)
	db := filepath.Join(t.TempDir(), "shop.db")
	sp := startShop(t, bin, rs.Addr(), db, freeAddr(t))
	api := newShopAPI(sp.URL)
	defer api.close()

	const (
		nAccounts = 8
		nOrders   = 240
		opening   = int64(10_000_000)
		spread    = 2 * time.Second // clients start at random times within it
	)
	rng := rand.New(rand.NewPCG(10, 10))
	accts := make([]shopAccount, nAccounts)
	for i := range accts {
		api.must(t, "POST", "/api/accounts", map[string]any{"owner": fmt.Sprintf("acct-%d", i), "balance": opening}, http.StatusCreated, &accts[i])
	}
	orders := make([]shopOrder, nOrders)
	for i := range orders {
		body := map[string]any{"account_id": accts[i%nAccounts].ID, "amount": 100 + rng.IntN(900)}
		api.must(t, "POST", "/api/orders", body, http.StatusCreated, &orders[i])
	}

	// Three clients per order: a double click (two requests with one key) and a second tab
	// with its own key.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		st       payStats
		wg       sync.WaitGroup
		outcomes = make([][3]payOutcome, nOrders)
	)
	start := time.Now()
	for i, o := range orders {
		keys := [3]string{"k-" + o.ID + "-a", "k-" + o.ID + "-a", "k-" + o.ID + "-b"}
		for c, key := range keys {
			delay := time.Duration(rng.Int64N(int64(spread)))
			wg.Go(func() {
				pause(ctx, delay)
				outcomes[i][c] = payUntilFinal(ctx, api, o.ID, key, &st)
			})
		}
	}
	// Two crashes during the storm, each followed by a restart 200 ms later.
	var restarted time.Time
	for _, at := range []time.Duration{600 * time.Millisecond, 1500 * time.Millisecond} {
		time.Sleep(time.Until(start.Add(at)))
		sp.kill()
		time.Sleep(200 * time.Millisecond)
		sp.start()
		restarted = time.Now()
	}
	wg.Wait()

	// Every client got a final answer; exactly one of each order's clients was charged.
	var paid, replayed, already, gaveUp int
	var lastFinal time.Time
	for i, o := range orders {
		fresh := 0
		for _, out := range outcomes[i] {
			switch out.final {
			case "paid":
				fresh++
				paid++
			case "replayed":
				replayed++
			case "already_paid":
				already++
			default:
				gaveUp++
				t.Errorf("order %s: a client gave up after %d attempts: %s", o.ID, out.attempts, out.err)
			}
			if out.at.After(lastFinal) {
				lastFinal = out.at
			}
		}
		if fresh > 1 {
			t.Errorf("order %s: %d clients got a fresh 200", o.ID, fresh)
		}
	}

	// The books, through the API: each order paid, one charge each, balances match ledgers.
	charges := map[string]int{}
	for _, a := range accts {
		for _, e := range ledgerCheck(t, api, a.ID, opening) {
			if e.Kind == "charge" {
				charges[e.OrderID]++
			}
		}
	}
	doubled, unpaid := 0, 0
	for _, o := range orders {
		var now shopOrder
		api.must(t, "GET", "/api/orders/"+o.ID, nil, http.StatusOK, &now)
		if now.Status != "paid" {
			unpaid++
			t.Errorf("order %s is %s", o.ID, now.Status)
		}
		if charges[o.ID] != 1 {
			doubled++
			t.Errorf("order %s charged %d times", o.ID, charges[o.ID])
		}
	}

	// And in the database file, after a clean stop: every balance version is its ledger length.
	sp.stop()
	torn := sqliteVersionsMatch(t, db)

	t.Logf("RESULT | shop SIGKILLed twice mid pay storm, restarted | orders=%d clients=%d attempts=%d transport_errors=%d busy_409=%d unavailable_503=%d other=%d fresh_200=%d replayed=%d already_paid=%d gave_up=%d double_charges=%d unpaid=%d torn_writes=%d last_final_after_restart=%v storm=%v",
		nOrders, 3*nOrders, st.attempts.Load(), st.transport.Load(), st.busy.Load(), st.unavailable.Load(), st.other.Load(),
		paid, replayed, already, gaveUp, doubled, unpaid, torn, lastFinal.Sub(restarted).Round(time.Millisecond), lastFinal.Sub(start).Round(time.Millisecond))
	if st.transport.Load() == 0 {
		t.Error("no request was cut by the crashes: the test proved nothing")
	}
}

// sqliteVersionsMatch opens the shop's database file read-only and checks that every
// account's balance version equals its number of ledger entries (a balance written without
// its ledger entry, torn by the crash, shows as a higher version). It returns the number of
// accounts that differ.
func sqliteVersionsMatch(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT a.id, a.version, (SELECT COUNT(*) FROM ledger l WHERE l.account_id = a.id) FROM accounts a`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	torn := 0
	for rows.Next() {
		var id string
		var version, entries int64
		if err := rows.Scan(&id, &version, &entries); err != nil {
			t.Fatal(err)
		}
		if version != entries {
			torn++
			t.Errorf("account %s: balance version %d, %d ledger entries", id, version, entries)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return torn
}
