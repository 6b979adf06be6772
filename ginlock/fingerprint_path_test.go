package ginlock_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// Two paths that clean to the same one can still be two objects to the handler: a catch-all
// parameter keeps repeated slashes (Gin does not clean the path unless RemoveExtraSlash is
// set: /files/a//b gives "/a//b"), and an engine that routes by the raw path (UseRawPath, for
// names holding an encoded slash) gives "a//b" for /objects/a%2F%2Fb. The fingerprint covers
// the route's parameters as the handler gets them, so an Idempotency-Key reused for the other
// object is 422, not the first object's answer (the fingerprint cleaned the path, and
// replayed it).
func TestPathSpellingIsAnotherRequest(t *testing.T) {
	for _, tc := range []struct {
		name, route, param, first, other, stored string
		rawPath                                  bool
	}{
		{"catch-all", "/files/*path", "path", "/files/a//b", "/files/a/b", `{"stored":"/a//b"}`, false},
		{"raw path", "/objects/:name", "name", "/objects/a%2F%2Fb", "/objects/a%2Fb", `{"stored":"a//b"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			r := router()
			r.UseRawPath = tc.rawPath
			var runs atomic.Int32
			r.PUT(tc.route, ginlock.New(e.locks, payKey), func(c *gin.Context) {
				runs.Add(1)
				c.JSON(http.StatusCreated, gin.H{"stored": c.Param(tc.param)})
			})
			key := idemKey(t)
			first := do(r, req{method: http.MethodPut, path: tc.first, user: "alice", key: key, body: `{"size":1}`})
			if first.Code != http.StatusCreated || first.Body.String() != tc.stored {
				t.Fatalf("first: %d %s, want 201 %s", first.Code, first.Body, tc.stored)
			}
			other := do(r, req{method: http.MethodPut, path: tc.other, user: "alice", key: key, body: `{"size":1}`})
			if other.Code != http.StatusUnprocessableEntity {
				t.Fatalf("same key, other object %s: %d %s (replayed %q, handler runs %d); want 422",
					tc.other, other.Code, other.Body, other.Header().Get(ginlock.ReplayedHeader), runs.Load())
			}
		})
	}
}
