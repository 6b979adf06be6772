package dlock

import (
	"strconv"
	"strings"
	"time"
)

// keySuffixes are the suffixes of a lock's keys in script order (lock, queue, queue
// deadlines, record), then its channel.
var keySuffixes = [...]string{"lock", "q", "qd", "done", "ch"}

// keys returns the four keys of a lock in script order and its channel. They are substrings
// of one string: two allocations per lock, not six.
func (b *redisBackend) keys(key string) ([]string, string) {
	tag := escapeTag(key)
	var sb strings.Builder
	sb.Grow(len(keySuffixes) * (len(b.prefix) + len(tag) + 4 + 4))
	var ends [len(keySuffixes)]int
	for i, suffix := range keySuffixes {
		b.writeName(&sb, tag, suffix)
		ends[i] = sb.Len()
	}
	all := sb.String()
	keys := make([]string, len(keySuffixes)-1)
	start := 0
	for i := range keys {
		keys[i], start = all[start:ends[i]], ends[i]
	}
	return keys, all[start:]
}

// writeName writes the name of a lock's key or channel: prefix, hash tag (the escaped lock
// key), suffix (see keySuffixes).
func (b *redisBackend) writeName(sb *strings.Builder, tag, suffix string) {
	sb.WriteString(b.prefix)
	sb.WriteString(":{")
	sb.WriteString(tag)
	sb.WriteString("}:")
	sb.WriteString(suffix)
}

// lockNames are the names of one lock's keys and channel, with the keys converted to script
// arguments: made once per acquisition and handed back by the Client with every request
// about the lease (acquireRequest.names), so neither a release nor a renewal builds them
// again. A lockNames is never changed once made.
type lockNames struct {
	keys    []string // script order, see keySuffixes
	keyArgs [len(keySuffixes) - 1]any
	ch      string
}

// names returns given when it is a lockNames (of key: the Client passes back only what
// this backend made for the same key), else makes key's.
func (b *redisBackend) names(key string, given any) *lockNames {
	if n, ok := given.(*lockNames); ok {
		return n
	}
	n := &lockNames{}
	n.keys, n.ch = b.keys(key)
	for i, k := range n.keys {
		n.keyArgs[i] = k
	}
	return n
}

func (b *redisBackend) pubCmd() string {
	if b.cluster {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// ttlArg is the script argument for a lease of ttl in ms.
func (b *redisBackend) ttlArg(ttl time.Duration) any {
	if ttl == b.lease {
		return b.leaseArg
	}
	return ms(ttl)
}

func (b *redisBackend) member(r acquireRequest) string {
	flag := 0
	if r.skipCompleted {
		flag = 1
	}
	return r.owner + ":" + strconv.FormatInt(ms(r.ttl), 10) + ":" + strconv.Itoa(flag)
}

// channel returns the channel of a lock and its slot (see slot), building no key name.
func (b *redisBackend) channel(key string) (string, int) {
	tag, suffix := escapeTag(key), keySuffixes[len(keySuffixes)-1]
	var sb strings.Builder
	sb.Grow(len(b.prefix) + len(tag) + 4 + len(suffix))
	b.writeName(&sb, tag, suffix)
	ch := sb.String()
	if b.cluster {
		return ch, hashSlot(ch) // the lock's hash tag: the slot of its keys
	}
	return ch, 0
}

// slot is the pub/sub connection of a lock's channel, given the lock's keys: on a Cluster
// the keys' hash slot, else 0.
func (b *redisBackend) slot(keys []string) int {
	if b.cluster {
		return hashSlot(keys[0])
	}
	return 0
}

// escapeTag makes s safe inside a Redis Cluster hash tag: no brace can end or open a tag, so
// a user-chosen key cannot move its lock to another slot, and distinct keys stay distinct.
func escapeTag(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	return tagEscaper.Replace(s)
}

// tagEscaper is built once: building a Replacer costs more than a Redis call's client side.
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
