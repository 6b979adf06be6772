package ginlock_test

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// panicMessage runs f and returns the string it panicked with ("" when it did not panic, or
// panicked with something else, such as a nil dereference's runtime error).
func panicMessage(f func()) (msg string) {
	defer func() { msg, _ = recover().(string) }()
	f()
	return ""
}

// A nil *gin.Context is refused by NewSource itself, not by the Source's first use in a
// handler.
func TestNewSourcePanicsOnNilContext(t *testing.T) {
	const want = "ginlock: NewSource with a nil *gin.Context"
	if msg := panicMessage(func() { ginlock.NewSource(nil, 0) }); msg != want {
		t.Fatalf("NewSource(nil, 0) panicked with %q, want %q", msg, want)
	}
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest("POST", "/", nil)
	if msg := panicMessage(func() { ginlock.NewSource(c, 0) }); msg != "" {
		t.Fatalf("NewSource of a request's context panicked: %s", msg)
	}
}

// A replay header name no response can carry is a configuration mistake, reported at start-up
// with the option and the name, not silently stored for no one.
func TestReplayHeadersRejectsBadNames(t *testing.T) {
	e := setup(t)
	for _, name := range []string{"", " ", "   ", "X Request-Id", " Location", "Location:", "Set-Cookie\r\n", "Läge"} {
		t.Run(strconv.Quote(name), func(t *testing.T) {
			msg := panicMessage(func() {
				ginlock.New(e.locks, payKey, ginlock.WithReplayHeaders("Content-Type", name))
			})
			if !strings.Contains(msg, "ginlock: WithReplayHeaders") || !strings.Contains(msg, strconv.Quote(name)) {
				t.Fatalf("panic %q, want one naming WithReplayHeaders and %s", msg, strconv.Quote(name))
			}
		})
	}
	// Names in any case, and with the characters a token allows, are accepted.
	if msg := panicMessage(func() {
		ginlock.New(e.locks, payKey, ginlock.WithReplayHeaders("x-payment-id", "Content-Type", "X_Trace.v2", "etag"))
	}); msg != "" {
		t.Fatalf("valid names refused: %s", msg)
	}
}
