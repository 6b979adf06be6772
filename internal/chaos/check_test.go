package chaos

import (
	"testing"
	"time"
)

// The checker must catch what it is there to catch.
func TestCheckCatchesViolations(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ok := []Section{
		{Holder: "a", Token: 1, Start: at(0), End: at(10), Acked: true},
		{Holder: "b", Token: 2, Start: at(11), End: at(20), Acked: true},
	}
	okLog := []Write{{1, 1}, {2, 2}}
	for _, tc := range []struct {
		name     string
		sections []Section
		final    int64
		log      []Write
		bad      bool
	}{
		{"clean run", ok, 2, okLog, false},
		{"lost update", ok, 1, []Write{{1, 1}, {2, 1}}, true},
		{"doubled", ok, 3, okLog, true},
		{"out of order writes", ok, 2, []Write{{2, 1}, {1, 2}}, true},
		{"silent overlap", []Section{
			{Holder: "a", Token: 1, Start: at(0), End: at(15), Acked: true},
			{Holder: "b", Token: 2, Start: at(10), End: at(20), Acked: true},
		}, 2, okLog, true},
		{"overlap with loss reported", []Section{
			{Holder: "a", Token: 1, Start: at(0), End: at(15), Acked: true, SawLost: true},
			{Holder: "b", Token: 2, Start: at(10), End: at(20), Acked: true},
		}, 2, okLog, false},
		{"fenced late write, loss unseen", []Section{
			{Holder: "a", Token: 1, Start: at(0), End: at(15), Fenced: true},
			{Holder: "b", Token: 2, Start: at(10), End: at(20), Acked: true},
		}, 1, []Write{{2, 1}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.sections, tc.final, tc.log, time.Time{})
			if r.OK() == tc.bad {
				t.Fatalf("OK = %v, violations %v", r.OK(), r.Violations)
			}
		})
	}
}
