package httpguard

import (
	"sync"
	"time"
)

// Sampler lets one log line through per interval and counts the ones it
// held back, so that a flood of refusals (a guesser, a sender stuck on an
// old token) costs a line every interval, not a line a request.
type Sampler struct {
	mu    sync.Mutex
	every time.Duration
	last  time.Time
	held  int
	// Now is the clock; time.Now unless a test sets it.
	Now func() time.Time
}

// NewSampler lets a line through at most once every interval.
func NewSampler(every time.Duration) *Sampler { return &Sampler{every: every, Now: time.Now} }

// Allow reports whether this line is logged, and how many were held back
// since the last one that was.
func (s *Sampler) Allow() (held int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	if !s.last.IsZero() && now.Sub(s.last) < s.every {
		s.held++
		return 0, false
	}
	held, s.held, s.last = s.held, 0, now
	return held, true
}
