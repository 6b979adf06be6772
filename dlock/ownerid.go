package dlock

import (
	"fmt"

	"github.com/google/uuid"
)

// ownerIDs makes the owner ids of one Client: random (version 4) UUIDs whose first 8 bytes
// are the Client's, the same in all its ids, and whose last 8 bytes are new for each. The
// shared part, prefix in text form, lets the store tell this Client's waiters from those of
// other Clients: a hand-off to one of ours is told to it here, at once, and needs no message.
// 62 random bits per id within a Client, and 60 per Client, keep ids apart.
type ownerIDs struct {
	head   [8]byte
	prefix string // the first 18 characters of every id: "xxxxxxxx-xxxx-4xxx"
}

// ownerPrefixLen is the length of the text form of an id's first 8 bytes.
const ownerPrefixLen = 18

func newOwnerIDs() ownerIDs {
	u := uuid.New() // version 4: the version bits are in the shared part, the variant bits in the rest
	var ids ownerIDs
	copy(ids.head[:], u[:8])
	ids.prefix = u.String()[:ownerPrefixLen]
	return ids
}

// next returns a new owner id.
func (ids ownerIDs) next() (string, error) {
	u, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("dlock: owner id: %w", err)
	}
	copy(u[:8], ids.head[:])
	return u.String(), nil
}
