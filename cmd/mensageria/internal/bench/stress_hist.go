package bench

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// Histogram counts durations in log-linear buckets, in the manner of an
// HDR histogram: exact below histSub microseconds, and within 1/histSub
// (about 1.6%) above, from a microsecond to about 36 days. Its memory is
// fixed (histBuckets counters) whatever the number of samples, so a run
// of hours at thousands of messages a second costs what a second does.
// It is safe for concurrent use.
type Histogram struct {
	mu     sync.Mutex
	counts [histBuckets]uint64
	n      uint64
	max    time.Duration
}

const (
	// histSubBits sets the precision: histSub buckets per power of two.
	histSubBits = 6
	histSub     = 1 << histSubBits
	// histTop is the largest power of two (in µs) the buckets reach.
	histTop     = 42
	histBuckets = histSub + (histTop-histSubBits+1)*histSub
)

// histIndex is the bucket of v microseconds.
func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // v>>shift is in [histSub, 2*histSub)
	i := histSub + shift*histSub + int(v>>shift) - histSub
	return min(i, histBuckets-1)
}

// histUpper is the largest value, in microseconds, bucket i counts.
func histUpper(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	shift := (i - histSub) / histSub
	sub := uint64((i-histSub)%histSub + histSub)
	return (sub+1)<<shift - 1
}

// Add records one duration; a negative one counts as zero.
func (h *Histogram) Add(d time.Duration) {
	us := uint64(max(d, 0) / time.Microsecond)
	h.mu.Lock()
	h.counts[histIndex(us)]++
	h.n++
	h.max = max(h.max, d)
	h.mu.Unlock()
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Max is the largest sample, exactly.
func (h *Histogram) Max() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	o.mu.Lock()
	counts, n, mx := o.counts, o.n, o.max
	o.mu.Unlock()
	h.mu.Lock()
	for i, c := range counts {
		h.counts[i] += c
	}
	h.n += n
	h.max = max(h.max, mx)
	h.mu.Unlock()
}

// Percentile is the p-th percentile (0-100): the upper bound of the bucket
// holding the sample of that rank, so never below the true value and at
// most 1/64 (or 1µs) above it; capped at the exact maximum. Zero without samples.
func (h *Histogram) Percentile(p float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	// The rank of the sample at or below which p% of them lie (1-based).
	rank := uint64(math.Ceil(p / 100 * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			// Samples are truncated to whole microseconds: the bucket's
			// last microsecond runs up to the next one.
			v := time.Duration(histUpper(i)+1)*time.Microsecond - 1
			return min(v, h.max)
		}
	}
	return h.max
}

// PercentileMs is Percentile in milliseconds.
func (h *Histogram) PercentileMs(p float64) float64 {
	return float64(h.Percentile(p)) / float64(time.Millisecond)
}
