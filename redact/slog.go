package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler returns a slog.Handler that masks every record before h sees it:
// the message, and each string, error and fmt.Stringer attribute (in
// groups too) by Text. Other values pass as they are. Wrapping a handler
// twice wraps it once.
func Handler(h slog.Handler) slog.Handler {
	if m, ok := h.(*handler); ok {
		return m
	}
	return &handler{h: h}
}

type handler struct{ h slog.Handler }

func (m *handler) Enabled(ctx context.Context, l slog.Level) bool { return m.h.Enabled(ctx, l) }

func (m *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return m.h.Handle(ctx, out)
}

func (m *handler) WithAttrs(as []slog.Attr) slog.Handler {
	ms := make([]slog.Attr, len(as))
	for i, a := range as {
		ms[i] = attr(a)
	}
	return &handler{h: m.h.WithAttrs(ms)}
}

func (m *handler) WithGroup(name string) slog.Handler { return &handler{h: m.h.WithGroup(name)} }

func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Text(v.String()))
	case slog.KindGroup:
		g := v.Group()
		ms := make([]slog.Attr, len(g))
		for i, ga := range g {
			ms[i] = attr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(ms...)}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			if s, ok := safely(x.Error); ok {
				if m := Text(s); m != s {
					return slog.Any(a.Key, Error(x))
				}
			}
		case fmt.Stringer:
			if s, ok := safely(x.String); ok {
				if m := Text(s); m != s {
					return slog.String(a.Key, m)
				}
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// safely calls a method that may panic on a nil receiver inside a non-nil
// interface; slog's own handlers print such a value as <nil>, and so it
// stays.
func safely(f func() string) (s string, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return f(), true
}
