package dlock

import (
	"context"
	"strings"
	"testing"
)

// A release script that runs twice (go-redis sends the call again after a network error, and
// the first run went through, its reply lost) answers released the second time, also when
// the lock changed hands between the two runs and its next holder released it in turn: the
// retry tombstone r names the last few full releases, not only the last. Each case runs the
// first release of a, then what happens before the retry, then the retry. Owner ids are made
// as a Client makes them: r keeps their random tails.
func TestScriptRetriedReleaseAfterLaterReleases(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup runs while a holds the lock; between, after a's first release.
		setup, between func(r *scriptRig, id func(string) string)
	}{
		{
			name:  "handed to a waiter that released",
			setup: func(r *scriptRig, id func(string) string) { r.wait(id("w")) },
			between: func(r *scriptRig, id func(string) string) {
				r.wantOwner(id("w"))
				r.releaseToNobody(id("w"))
			},
		},
		{
			name: "handed to a waiter that handed it on",
			setup: func(r *scriptRig, id func(string) string) {
				r.wait(id("w1"))
				r.wait(id("w2"))
			},
			between: func(r *scriptRig, id func(string) string) {
				if rel := r.release(id("w1")); rel.next.owner != id("w2") {
					r.t.Fatalf("w1's release handed off to %q, want w2", rel.next.owner)
				}
			},
		},
		{
			name: "taken and released by another caller",
			between: func(r *scriptRig, id func(string) string) {
				r.takeAndRelease(id("b"))
			},
		},
		{
			name: "four more full releases",
			between: func(r *scriptRig, id func(string) string) {
				for _, o := range []string{"b", "c", "d", "e"} {
					r.takeAndRelease(id(o))
				}
			},
		},
		{
			// The scripts before kept the last releaser's whole owner id in r.
			name:  "tombstone left by the scripts before",
			setup: func(r *scriptRig, id func(string) string) { r.hset("r", id("old")) },
			between: func(r *scriptRig, id func(string) string) {
				r.takeAndRelease(id("b"))
				if rel := r.releaseAgain(id("old")); !rel.owned {
					r.t.Fatalf("retried release of the owner the scripts before left in r: %+v, want released", rel)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newScriptRig(t)
			id := ownerNames()
			if res := r.acquire(id("a"), false); res.status != statusObtained {
				t.Fatalf("a: %+v", res)
			}
			if tc.setup != nil {
				tc.setup(r, id)
			}
			r.release(id("a"))
			tc.between(r, id)
			rel := r.releaseAgain(id("a"))
			if !rel.owned || rel.left != 0 || rel.next.owner != "" {
				t.Fatalf("retried release of a, r = %q: %+v, want released (owned, no holds left, nobody named)", r.field("r"), rel)
			}
		})
	}
}

// r is bounded: it names the last 5 full releases (the tails of their owner ids that fit in
// 64 bytes, so that Redis keeps the lock hash compact), and a release further back answers
// lost when retried, as a retry after the hash is gone does. A tail is matched whole.
func TestScriptReleaseTombstoneBounded(t *testing.T) {
	r := newScriptRig(t)
	id := ownerNames()
	names := []string{"a", "b", "c", "d", "e", "f"}
	for _, o := range names {
		r.takeAndRelease(id(o))
	}
	var want []string
	for i := len(names) - 1; i >= 1; i-- {
		want = append(want, id(names[i])[24:])
	}
	if got := r.field("r"); got != strings.Join(want, " ") {
		t.Fatalf("r = %q, want the tails of the last 5 full releasers, newest first: %q", got, strings.Join(want, " "))
	}
	if rel := r.releaseAgain(id("a")); rel.owned {
		t.Fatalf("retried release of a, after 5 more full releases: %+v, want lost", rel)
	}
	if rel := r.releaseAgain(id("b")); !rel.owned {
		t.Fatalf("retried release of b, the oldest kept: %+v, want released", rel)
	}
	if rel := r.releaseAgain(id("f")[:35]); rel.owned {
		t.Fatalf("release of a part of f's owner id: %+v, want lost", rel)
	}
}

// ownerNames returns owner ids made as a Client makes them (see ownerIDs), one per name.
func ownerNames() func(name string) string {
	ids, byName := newOwnerIDs(), map[string]string{}
	return func(name string) string {
		if _, ok := byName[name]; !ok {
			byName[name] = ids.next()
		}
		return byName[name]
	}
}

// wait queues owner behind the lock's holder.
func (r *scriptRig) wait(owner string) {
	r.t.Helper()
	if res := r.acquire(owner, true); res.status != statusBusy {
		r.t.Fatalf("%s: %+v, want busy and in line", owner, res)
	}
}

// takeAndRelease takes the free lock for owner and releases it.
func (r *scriptRig) takeAndRelease(owner string) {
	r.t.Helper()
	if res := r.acquire(owner, false); res.status != statusObtained {
		r.t.Fatalf("%s: %+v", owner, res)
	}
	r.release(owner)
}

// releaseAgain runs owner's release script as go-redis's retry of a call that ran already
// sends it.
func (r *scriptRig) releaseAgain(owner string) releaseResult {
	r.t.Helper()
	res, err := r.be.release(context.Background(), releaseRequest{key: r.key, owner: owner, entry: "1"})
	if err != nil {
		r.t.Fatalf("release %s again: %v", owner, err)
	}
	return res
}

func (r *scriptRig) wantOwner(owner string) {
	r.t.Helper()
	if o := r.field("o"); o != owner {
		r.t.Fatalf("owner %q, want %q", o, owner)
	}
}

// hset writes one field of the lock hash, as a script before this one may have left it.
func (r *scriptRig) hset(field, value string) {
	r.t.Helper()
	if err := r.rdb.HSet(context.Background(), r.keys[0], field, value).Err(); err != nil {
		r.t.Fatal(err)
	}
}
