package dlock

import (
	"encoding/binary"
	"math/rand/v2"

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

// next returns a new owner id. Its last 8 bytes come from math/rand/v2's ChaCha8 generator,
// which the runtime seeds from the operating system: no system call and no error for each
// acquisition, where a new crypto/rand UUID costs both. The variant bits are set as in
// every version 4 UUID.
func (ids ownerIDs) next() string {
	var u uuid.UUID
	copy(u[:8], ids.head[:])
	binary.BigEndian.PutUint64(u[8:], rand.Uint64())
	u[8] = u[8]&0x3f | 0x80 // variant RFC 4122
	return u.String()
}
