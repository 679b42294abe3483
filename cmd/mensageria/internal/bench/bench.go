// Package bench holds the benchmark scenarios of the project. The Go
// benchmarks (go test -bench) and `mensageria bench` run the same code, so
// the figures in docs/benchmarks.md can be reproduced either way.
package bench

import (
	"encoding/json"
	"io"
	"slices"
	"sync"
	"time"
)

// Result is the outcome of one scenario: named metrics in the units their
// names say (msgs/s, p50-ms, raw-ratio, ...).
type Result struct {
	Scenario string             `json:"scenario"`
	Metrics  map[string]float64 `json:"metrics"`
	Notes    string             `json:"notes,omitempty"`
}

// Set records one metric.
func (r *Result) Set(name string, v float64) {
	if r.Metrics == nil {
		r.Metrics = map[string]float64{}
	}
	r.Metrics[name] = v
}

// WriteJSON writes r as one JSON object on one line.
func (r Result) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Latencies collects durations and reports percentiles. It is safe for
// concurrent use: sinks and senders report from their own goroutines.
type Latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one latency.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// Len is the number of samples.
func (l *Latencies) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

// PercentileMs returns the p-th percentile (0-100) in milliseconds.
func (l *Latencies) PercentileMs(p float64) float64 {
	l.mu.Lock()
	s := slices.Clone(l.d)
	l.mu.Unlock()
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)-1))
	return float64(s[i]) / float64(time.Millisecond)
}

// setPercentiles records lat's p50 and p99 in r as <prefix>p50-ms and
// <prefix>p99-ms.
func (r *Result) setPercentiles(prefix string, lat *Latencies) {
	r.Set(prefix+"p50-ms", lat.PercentileMs(50))
	r.Set(prefix+"p99-ms", lat.PercentileMs(99))
}

// orDefault sets *p to v when a config left it at zero (or below).
func orDefault(p *int, v int) {
	if *p <= 0 {
		*p = v
	}
}
