package main

import (
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{nil, 0, 0, 0},
		{[]float64{3}, 3, 3, 3},
		{[]float64{3, 1, 2}, 2, 1, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		s := spreadOf(tc.in)
		if s.med != tc.med || s.lo != tc.lo || s.hi != tc.hi || s.n != len(tc.in) {
			t.Errorf("spreadOf(%v) = %+v, want median %v, range %v-%v", tc.in, s, tc.med, tc.lo, tc.hi)
		}
	}
}

// TestRoundRatios checks that ratios pair a contender's rounds with the floor's same rounds.
func TestRoundRatios(t *testing.T) {
	us := time.Microsecond
	floor := &uncontendedResult{rounds: []time.Duration{100 * us, 200 * us, 100 * us}}
	c := &uncontendedResult{rounds: []time.Duration{110 * us, 200 * us, 150 * us}}
	s := c.ratioSpread(floor)
	if s.med != 1.1 || s.lo != 1 || s.hi != 1.5 || s.n != 3 {
		t.Errorf("ratioSpread = %+v, want median 1.1, range 1-1.5", s)
	}
}

func TestLoadHigh(t *testing.T) {
	for _, tc := range []struct {
		load  string
		cores int
		want  bool
	}{
		{"2.02 1.36 1.14", 2, true},
		{"1.50 1.36 1.14", 2, false},
		{"1.50 1.36 1.14", 1, true},
		{"unknown", 2, false},
	} {
		if got := loadHigh(tc.load, tc.cores); got != tc.want {
			t.Errorf("loadHigh(%q, %d) = %v, want %v", tc.load, tc.cores, got, tc.want)
		}
	}
}
