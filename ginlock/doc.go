// Package ginlock is Gin middleware that runs a handler under a distributed lock, so that a
// payment is not made twice and two deductions from one account never interleave. It
// translates between Gin and the two packages that do the work: keyfunc derives the lock key
// from the request, dlock holds the lock in Redis.
//
//	type userKey struct{} // the auth middleware sets it on the request's context:
//	// c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), userKey{}, id))
//	// (c.Set stores values ginlock looks up by string keys only: c.Set("user", id) with
//	// keyfunc.ContextValue("user") works too)
//
//	payKey := keyfunc.Join(keyfunc.IdempotencyKey()).
//		Scope(keyfunc.ContextValue(userKey{}).Named("user"))
//	r.POST("/payments", ginlock.New(locks, payKey), createPayment)
//
//	// Integer: withdraw parses the id as a number, so /accounts/042 is account 42 too.
//	accountKey := keyfunc.MustTemplate("account:{id}", map[string]keyfunc.Part{"id": keyfunc.Param("id").Integer()})
//	r.POST("/accounts/:id/withdraw", ginlock.New(locks, accountKey, ginlock.WithWait(2*time.Second)), withdraw)
//
// For each request the middleware derives the key (400 or 413 when it cannot), takes the lock
// (409 with Retry-After when it is busy, 503 when Redis is down), runs the rest of the chain
// with the lock's context in c.Request, and releases the lock when the chain returns or
// panics. See New for every status it answers with.
//
// # Idempotent replay
//
// When the key uses the Idempotency-Key header (or with WithReplay), the response of a
// completed request is stored under the key, scoped by method and route, and replayed to
// later requests with the same key and the same fingerprint (method, route, path parameters as the handler gets them,
// query and canonical body), marked Idempotent-Replayed: true; a request with the same key and
// another fingerprint gets 422. When the Idempotency-Key part is Optional, a request without
// the header (or with an empty one) is locked but neither replayed nor stored, in any mode. Storing uses dlock's completion records: the lookup is part of the
// acquisition and the store is part of the release, so a request costs two Redis round trips
// with or without replay, and a duplicate arriving while the response is being stored can
// never run the handler again.
//
// # Guarantees
//
//   - The handler runs only while the lock is held; with replay, it runs at most once per
//     key and retention, except after a response that is not stored (by default 5xx, the
//     transient 408, 409, 425, 429 and 499, and 206, 304 and 416, which answer the
//     request's own validators and Range; a body over WithMaxReplayBody, a panic before the
//     response started or one after a body without Content-Length, a lost lock, an answer
//     forwarded with engine.HandleContext, which writes around the middleware), whose
//     retry runs it again. What is stored is what the
//     handler wrote, even if the client went away before receiving it, as long as the
//     middleware can tell it is all of it: a client gone before the body started leaves a
//     handler that never flushed with its answer stored, also one of several writes; after a
//     failed write, with the client gone after the body started, or after a flush with the
//     client gone, only one write, a body as long as its Content-Length, or no body with a
//     status of its own (a 201 with a Location) is; after a panic, only the last two (a
//     panic that gin's Recovery, placed after ginlock, caught once the response started
//     shows as a 5xx asked for too late, and counts as a panic; a custom recovery that asks
//     for nothing then cannot be seen: place Recovery before ginlock). A
//     stream cut short, or a body whose render failed part-way (gin records the error and
//     aborts), is not stored. A response that a
//     ginlock middleware nested inside another one made itself (its 409 for a busy account
//     lock, say) is never stored by the outer one.
//   - The client never has the whole answer while the lock is still held: of an answer whose
//     length the chain announced (c.Data, c.File), which net/http sends as it is written,
//     the last byte goes out once the lock is released (and the answer stored), and a flush of
//     an answer without a body is put off to then, so a request for the same key sent the
//     moment the answer ends is not answered 409. A handler that answers and goes on under
//     the lock therefore has its answer reach the client when it returns.
//   - The handler's context (c.Request.Context()) carries the lock: a nested dlock Acquire
//     of the same key on the same Client re-enters it, and the context is cancelled with
//     cause dlock.ErrLockLost when the lock is lost.
//   - The middleware releases only locks it obtained, also on panic, and restores the
//     original request context and writer when the chain returns.
//   - Redis unavailable means 503 and no handler (fail closed), unless WithFailOpen.
//   - A request whose context ended before its lock was tried (a server deadline spent in
//     earlier middleware) is answered 503 with Retry-After (ErrRequestEnded), not 409: the
//     lock was never seen busy. With WithWait, a context that ends once the wait began is
//     a wait that ran out: 409.
//   - Used engine-wide (r.Use) with no handler after it, the middleware passes a request
//     no route matches through untouched, so gin's own 404 or 405 answers it. Its own
//     errors are always application/problem+json (DefaultErrorHandler), whatever
//     Content-Type an earlier middleware preset.
//   - Keys and their values never appear in telemetry, logs or error bodies; only a hash.
//     The one exception is the error of a failing keyfunc.From function, which is logged as
//     the function wrote it (the client gets a bare 500); a From error that wraps a keyfunc
//     sentinel (ErrMissing, ErrInvalid, ErrTooLong) is answered like it, 400 with the error's
//     text in the detail, so keep values out of such errors.
//
// # Limits
//
//   - Keys are only as scoped as the key function makes them: scope them by the caller
//     (user or tenant) with keyfunc.Func.Scope, or two users choosing the same
//     Idempotency-Key share a lock and a stored response. Nor is the service in the scope:
//     services sharing one Redis need a dlock.WithPrefix each.
//   - The stored response is what the handler chain after the middleware wrote. A response
//     written by middleware placed before ginlock, after the chain returned, is not seen, nor
//     are header values it set before (a refreshed session cookie, a request id): a replay
//     keeps the retry's own, adding stored Set-Cookie values to them (and the values the
//     chain added to such a header, as Vary). Trailers are not stored. A chain that recorded
//     errors (c.Error) and sent no body, with no status or an error status (c.AbortWithError),
//     leaves its answer to such a middleware: nothing is stored, and a retry runs the handler
//     again. Errors recorded before ginlock ran do not count.
//   - A lost lock is detected by dlock's watchdog, not instantly; work that must not
//     overlap a successor should pass the fencing token (the Token of the lock FromContext
//     returns) to the resource it writes. When the handler returns without having answered
//     (no body, no status of its own), a lost lock is answered 409 with Retry-After and
//     without the headers the handler set; an answer it gave stands.
//   - When storing the response fails (Redis down or stalled for about a read timeout after
//     the handler ran) the lock expires at the end of its lease and a retry runs the handler
//     again. Replay alone cannot stop a duplicate payment then: the write that moves money
//     should also check the fencing token or keep its own record of the key.
//   - Redis that stops answering costs each request the Redis client's timeouts before its
//     503: with go-redis defaults (5 s read timeout) about 10 s. Set ReadTimeout (say
//     500 ms) or give requests a deadline.
//   - WithReplay on a key that names a resource rather than a request (account:{id}) stores
//     one response per account for the retention: a later, different request on the account
//     gets 422, a repeat gets the old response. Replay belongs on request keys.
package ginlock
