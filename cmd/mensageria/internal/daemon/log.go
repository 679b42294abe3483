package daemon

import (
	"io"
	"log/slog"

	"github.com/xadm/mensageria/redact"
)

// NewLogger is a daemon's logger on w, in format (text or json) from
// level (debug, info, warn or error): the --log-format and --log-level
// flags, whose names its usage errors give.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, Usage("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	// Every line passes through redact: no user-info password, query
	// string or fragment of a URL it quotes (a database URL, a route's, an
	// OTLP endpoint's) reaches the log.
	switch format {
	case "text":
		return slog.New(redact.Handler(slog.NewTextHandler(w, opts))), nil
	case "json":
		return slog.New(redact.Handler(slog.NewJSONHandler(w, opts))), nil
	}
	return nil, Usage("--log-format %q: use text or json", format)
}
