package ginlock_test

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// A payment endpoint: a client retrying with the same Idempotency-Key gets the first
// response back instead of paying twice. The key is scoped by the user the auth middleware
// stored with c.Set("user", id), so two users choosing the same key never meet.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	payKey := keyfunc.Join(keyfunc.IdempotencyKey()).Scope(keyfunc.ContextValue("user").Named("user"))

	r := gin.New()
	r.Use(gin.Recovery(), func(c *gin.Context) { c.Set("user", c.GetHeader("X-User")); c.Next() })
	r.POST("/payments", ginlock.New(locks, payKey), func(c *gin.Context) {
		// Runs once per user and key; retries get this response replayed for 24 h.
		c.JSON(http.StatusCreated, gin.H{"payment": "p-1"})
	})
	_ = r.Run(":8080")
}

// A per-account lock: deductions from one account run one at a time, whatever route and
// idempotency key they come with; a second request waits up to two seconds, then gets 409.
// The handler passes the fencing token to the ledger, which refuses writes from an older
// holder.
func ExampleNew_account() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	accountKey := keyfunc.MustTemplate("account:{id}", map[string]keyfunc.Part{"id": keyfunc.Param("id").Integer()}) // /accounts/042 is account 42
	lockAccount := ginlock.New(locks, accountKey, ginlock.WithWait(2*time.Second))

	r := gin.New()
	accounts := r.Group("/accounts/:id", lockAccount)
	accounts.POST("/withdraw", func(c *gin.Context) {
		lk, _ := ginlock.FromContext(c)
		_ = lk.Token() // e.g. UPDATE accounts SET balance = balance - ?, fence = ? WHERE id = ? AND fence <= ?
		c.Status(http.StatusNoContent)
	})
	_ = r.Run(":8080")
}

// Double-submit protection without a client key: the same user posting the same body twice
// within ten minutes gets the first response replayed. The user comes from the auth
// middleware's c.Set("user", id); a request without one is refused with 400.
func ExampleWithReplay() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	submitKey := keyfunc.Join(keyfunc.BodyHash()).Scope(keyfunc.ContextValue("user").Named("user"))

	r := gin.New()
	r.Use(gin.Recovery(), func(c *gin.Context) { c.Set("user", c.GetHeader("X-User")); c.Next() })
	r.POST("/transfers", ginlock.New(locks, submitKey, ginlock.WithReplay(10*time.Minute)), func(c *gin.Context) {
		c.JSON(http.StatusCreated, gin.H{"transfer": "t-1"})
	})
	_ = r.Run(":8080")
}
