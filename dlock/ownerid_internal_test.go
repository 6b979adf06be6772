package dlock

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// Owner ids of one Client are version 4 UUIDs that share their first 8 bytes, and only
// those; two Clients' ids do not share them.
func TestOwnerIDsShareTheClientPrefix(t *testing.T) {
	a, b := newOwnerIDs(), newOwnerIDs()
	if a.prefix == b.prefix {
		t.Fatalf("two Clients share the owner-id prefix %q", a.prefix)
	}
	seen := map[string]bool{}
	for range 1000 {
		id := a.next()
		u, err := uuid.Parse(id)
		if err != nil {
			t.Fatalf("owner id %q: %v", id, err)
		}
		if u.Version() != 4 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("owner id %q: version %d, variant %v", id, u.Version(), u.Variant())
		}
		if !strings.HasPrefix(id, a.prefix) || len(a.prefix) != ownerPrefixLen {
			t.Fatalf("owner id %q does not start with the Client's prefix %q", id, a.prefix)
		}
		if seen[id[ownerPrefixLen:]] {
			t.Fatalf("owner id %q given twice", id)
		}
		seen[id[ownerPrefixLen:]] = true
	}
}
