package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"
)

// isTerminal reports whether w is a character device, so screen-control
// sequences and progress redraws go only to people, never into files.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// visible shows what a string from the database or a peer holds on an
// operator's terminal: a bidi override (U+202E) or isolate, a zero-width
// or other invisible format character, a control character (an escape
// sequence would drive the terminal) or a line separator would otherwise
// act on the rendering, so that a type could read as another name. Each
// is printed as its code point, e.g. <U+202E>; so is invalid UTF-8, byte
// by byte. Text output only: JSON output keeps the value as stored.
func visible(s string) string {
	if strings.IndexFunc(s, hidden) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, "<0x%02X>", s[i])
		case hidden(r):
			fmt.Fprintf(&b, "<U+%04X>", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hidden reports the runes visible spells out: format characters (Cf,
// the bidi controls and zero-width ones among them), controls (Cc) but
// the newline and the tab that text output is made of, and the line and
// paragraph separators.
func hidden(r rune) bool {
	if r == '\n' || r == '\t' {
		return false
	}
	return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Cc, r) || r == '\u2028' || r == '\u2029'
}

// visibleWriter passes what is written through visible: an operator
// command's text output goes through one (a table's rows before its
// tabwriter, so that the columns are measured on what is shown). Each
// Write must hold whole runes, as one fmt call's output does.
type visibleWriter struct{ w io.Writer }

func (v visibleWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(v.w, visible(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newTable is a tabwriter on out and the writer its rows go through.
func newTable(out io.Writer, flags uint) (*tabwriter.Writer, io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', flags)
	return tw, visibleWriter{tw}
}
