package main

import (
	"fmt"
	"slices"
)

// spread is the median and range of a few per-round figures.
type spread struct {
	med, lo, hi float64
	n           int
}

// spreadOf returns the median (the mean of the middle two for an even count), minimum and
// maximum of xs; all zero for none.
func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spread{med: med, lo: s[0], hi: s[n-1], n: n}
}

// ratio formats a spread of ratios as "1.23x (1.05-1.60x)".
func (s spread) ratio() string {
	return fmt.Sprintf("%.2fx (%.2f–%.2fx)", s.med, s.lo, s.hi)
}

// count formats a spread of rates or counts with the given precision, as "123 (110–130)".
func (s spread) count(prec int) string {
	if s.n == 1 {
		return fmt.Sprintf("%.*f", prec, s.med)
	}
	return fmt.Sprintf("%.*f (%.*f–%.*f)", prec, s.med, prec, s.lo, prec, s.hi)
}

// ratioRange formats a spread of ratios as "median 1.23x, range 1.05–1.60x".
func (s spread) ratioRange() string {
	return fmt.Sprintf("median %.2fx, range %.2f–%.2fx", s.med, s.lo, s.hi)
}

// countRange formats a spread of rates or counts as "median 123, range 110–130".
func (s spread) countRange(prec int) string {
	return fmt.Sprintf("median %.*f, range %.*f–%.*f", prec, s.med, prec, s.lo, prec, s.hi)
}
