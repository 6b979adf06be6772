package metrics

import (
	"slices"
	"sync"
	"time"
)

// Sample collects durations. It is safe for concurrent use.
type Sample struct {
	mu     sync.Mutex
	d      []time.Duration
	sorted bool
}

// Add records one duration.
func (s *Sample) Add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.sorted = false
	s.mu.Unlock()
}

// Merge adds every duration of o.
func (s *Sample) Merge(o *Sample) {
	o.mu.Lock()
	ds := slices.Clone(o.d)
	o.mu.Unlock()
	s.mu.Lock()
	s.d = append(s.d, ds...)
	s.sorted = false
	s.mu.Unlock()
}

// Len returns the number of recorded durations.
func (s *Sample) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.d)
}

func (s *Sample) sortLocked() {
	if !s.sorted {
		slices.Sort(s.d)
		s.sorted = true
	}
}

// Quantile returns the nearest-rank q-quantile (q in [0, 1]); 0 for an empty sample.
func (s *Sample) Quantile(q float64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.d) == 0 {
		return 0
	}
	s.sortLocked()
	i := int(q*float64(len(s.d))+0.999999) - 1
	return s.d[min(max(i, 0), len(s.d)-1)]
}

// Max returns the largest duration, 0 for an empty sample.
func (s *Sample) Max() time.Duration { return s.Quantile(1) }

// Sorted returns a sorted copy of the durations.
func (s *Sample) Sorted() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sortLocked()
	return slices.Clone(s.d)
}
