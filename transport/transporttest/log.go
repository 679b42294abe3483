package transporttest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// LogRecords is a slog.Handler that keeps every record, for a test that
// counts the lines a Sender or the relay logged (an outage is logged
// once; a Sender adds no line per message). Its zero value is ready.
type LogRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Enabled implements slog.Handler: every level is kept.
func (h *LogRecords) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h *LogRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// WithAttrs implements slog.Handler; the attributes are not kept.
func (h *LogRecords) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup implements slog.Handler; the group is not kept.
func (h *LogRecords) WithGroup(string) slog.Handler { return h }

// Lines returns the records at level or above whose message contains
// part, each as "message attr=value ...".
func (h *LogRecords) Lines(level slog.Level, part string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level < level || !strings.Contains(r.Message, part) {
			continue
		}
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		out = append(out, b.String())
	}
	return out
}
