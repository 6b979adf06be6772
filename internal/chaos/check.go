package chaos

import (
	"fmt"
	"sort"
	"time"
)

// Report is the outcome of Check.
type Report struct {
	Sections      int      // critical sections entered
	Acked         int      // writes the store accepted
	Fenced        int      // reads or writes the store rejected by token
	Lost          int      // sections whose lock was taken over before they ended
	LostSeen      int      // of those, the holder was told
	LossOverlaps  int      // acknowledged sections overlapping a later one, loss reported
	Final         int64    // final balance
	Violations    []string // broken guarantees
	MaxGapAfter   time.Duration
	FirstAckAfter time.Duration // from Heal to the next acknowledged section start
}

// OK reports whether no guarantee was broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// String is a one-line summary for test logs and docs.
func (r Report) String() string {
	return fmt.Sprintf("sections=%d acked=%d fenced=%d lost=%d lost_seen=%d loss_overlaps=%d final=%d violations=%d",
		r.Sections, r.Acked, r.Fenced, r.Lost, r.LostSeen, r.LossOverlaps, r.Final, len(r.Violations))
}

// Check verifies the recorded sections against the store's final state and write log. heal is
// when the injected fault ended (zero: no fault); FirstAckAfter measures liveness from it.
func Check(sections []Section, final int64, log []Write, heal time.Time) Report {
	r := Report{Sections: len(sections), Final: final}
	violate := func(format string, args ...any) {
		if len(r.Violations) < 20 {
			r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
		}
	}
	var acked []Section
	for _, s := range sections {
		if s.Acked {
			acked = append(acked, s)
		}
		if s.Fenced {
			r.Fenced++
		}
	}
	r.Acked = len(acked)
	if final != int64(r.Acked) {
		violate("final balance %d but %d acknowledged increments", final, r.Acked)
	}
	// The store applied writes in token order, each one on top of the previous.
	for i, w := range log {
		if i > 0 && w.Token < log[i-1].Token {
			violate("write %d with token %d after token %d", i, w.Token, log[i-1].Token)
		}
		if w.Value != int64(i+1) {
			violate("write %d set %d: an update was lost or doubled", i, w.Value)
		}
	}
	// Sections by token: the order in which the lock was granted.
	byToken := append([]Section(nil), sections...)
	sort.Slice(byToken, func(i, j int) bool { return byToken[i].Token < byToken[j].Token })
	for i, s := range byToken {
		taken := false
		for _, later := range byToken[i+1:] {
			if later.Start.Before(s.End) {
				taken = true
				if s.Acked && later.Acked && !s.SawLost {
					violate("sections with tokens %d and %d overlapped and the first holder was not told", s.Token, later.Token)
				} else if s.Acked && later.Acked {
					r.LossOverlaps++
				}
				break
			}
		}
		if taken {
			r.Lost++
			if s.SawLost {
				r.LostSeen++
			} else {
				violate("holder %s (token %d) lost its lock to a later holder and was never told", s.Holder, s.Token)
			}
		}
	}
	if !heal.IsZero() {
		for _, s := range acked {
			if !s.Start.Before(heal) && (r.FirstAckAfter == 0 || s.Start.Sub(heal) < r.FirstAckAfter) {
				r.FirstAckAfter = s.Start.Sub(heal)
			}
		}
	}
	return r
}
