package ginlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// ProblemContentType is the media type of the default error responses (RFC 9457).
const ProblemContentType = "application/problem+json"

var (
	// ErrMismatch is the cause of a 422: the key already has a stored response for a request
	// with another fingerprint: another path (path parameters), query or body. (Method and
	// route are part of the key itself: the same Idempotency-Key on another route is another
	// key.)
	ErrMismatch = errors.New("ginlock: key reused for a different request")

	// ErrKeyInProgress is the cause of a 409 when the lock key holds the request's
	// Idempotency-Key: a request with the same key is running (or its response is not yet
	// recorded). It wraps dlock.ErrNotObtained. A 409 on any other key (a per-account lock)
	// is dlock.ErrNotObtained alone: the resource is busy with another request.
	ErrKeyInProgress = fmt.Errorf("ginlock: a request with the same Idempotency-Key is in progress: %w", dlock.ErrNotObtained)

	// ErrUndeclaredParam is the cause of a 500 when the key reads a path parameter that the
	// matched route does not declare (Param("id") on "/a/:account_id"): the server's mistake,
	// not the request's, so it is not a *keyfunc.PartError. Its text names the parameter and
	// the route.
	ErrUndeclaredParam = errors.New("ginlock: the key reads a path parameter the route does not declare")

	// ErrRequestEnded is the cause of a 503 when the request's context had ended before its
	// lock was tried (a deadline the server set was spent in the middleware before ginlock,
	// or the client went away), or, without WithWait, before Redis answered the look. Nothing
	// is known of the lock. The error also matches the context's error
	// (context.DeadlineExceeded, context.Canceled) and its cause.
	ErrRequestEnded = errors.New("ginlock: the request ended before its lock was tried")

	// ErrBadRecord is the cause of a 500 when a stored response cannot be decoded (written by
	// an incompatible version, or not by this package).
	ErrBadRecord = errors.New("ginlock: unreadable replay record")
)

// problem is an RFC 9457 problem details object. Part names the key part that failed, for
// 400 and 413.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Part   string `json:"part,omitempty"`
}

// DefaultErrorHandler writes an application/problem+json body (type "about:blank", the
// status's reason phrase as title, as RFC 9110 names it, a detail naming the failed key part when there is one) and aborts.
// Its details never include Redis errors or key values. Custom error handlers may call it.
func DefaultErrorHandler(c *gin.Context, status int, err error) {
	p := problem{Type: "about:blank", Title: statusTitle(status), Status: status, Detail: detail(status, err)}
	var pe *keyfunc.PartError
	if status < http.StatusInternalServerError && errors.As(err, &pe) {
		p.Part = pe.Part
	}
	body, _ := json.Marshal(p) // cannot fail: strings and an int
	// Set, not left to c.Data, which keeps a Content-Type set earlier (an API-wide default).
	c.Header("Content-Type", ProblemContentType)
	c.Data(status, ProblemContentType, body)
	c.Abort()
}

// statusTitle is the reason phrase RFC 9110 gives status: the title RFC 9457 recommends for
// an "about:blank" problem. net/http still has the older phrases of 413 and 422.
func statusTitle(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "Content Too Large"
	case http.StatusUnprocessableEntity:
		return "Unprocessable Content"
	}
	return http.StatusText(status)
}

// detail is the client-facing explanation of err. A server-side failure (500) is never
// explained: its error may hold internal details (a From function's database error).
func detail(status int, err error) string {
	var (
		pe     *keyfunc.PartError
		big    *bodyTooLargeError
		unread *bodyReadError
	)
	switch {
	case status == http.StatusInternalServerError:
		return "The request could not be processed."
	case errors.As(err, &big) && errors.As(err, &pe):
		return fmt.Sprintf("Request part %q: the body is larger than the limit of %d bytes.", pe.Part, big.limit)
	case errors.As(err, &big):
		return fmt.Sprintf("The request body is larger than the limit of %d bytes.", big.limit)
	case errors.As(err, &unread):
		return "The request body could not be read to its end."
	case errors.As(err, &pe):
		msg := "invalid value"
		if pe.Err != nil {
			msg = strings.TrimPrefix(pe.Err.Error(), "keyfunc: ")
		}
		return fmt.Sprintf("Request part %q: %s.", pe.Part, msg)
	case errors.Is(err, dlock.ErrLockLost):
		return "The request lost its lock before it finished; its response was not recorded."
	case errors.Is(err, ErrKeyInProgress):
		return "A request with the same Idempotency-Key is in progress; retry later."
	case errors.Is(err, dlock.ErrNotObtained):
		return "What this request works on is locked by another request; retry later."
	case errors.Is(err, ErrMismatch):
		return "This key was already used for a request with a different path, query or body."
	case errors.Is(err, ErrRequestEnded):
		return "The request ran out of time before its lock was tried; retry later."
	case status == http.StatusServiceUnavailable:
		return "The lock service is unavailable; retry later."
	}
	return "The request could not be processed."
}

// keyStatus maps an error of keyfunc.Func.Key to its status: 413 for a body over the cap,
// 400 for what the request got wrong (keyfunc's sentinels, a body that could not be read),
// 500 for anything else: a From function's own error, an error outside any part.
func keyStatus(err error) int {
	var unread *bodyReadError
	switch {
	case errors.Is(err, keyfunc.ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge
	case keyfunc.IsInputError(err), errors.As(err, &unread):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
