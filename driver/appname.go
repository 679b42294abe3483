package driver

import (
	"errors"
	"fmt"
	"regexp"
)

// ErrInvalidApp is wrapped by CheckApp's refusal.
var ErrInvalidApp = errors.New("mensageria: invalid app name")

// appName is what an app may be called: a name an operator can type and
// read back, with nothing blank, invisible or too long to print.
var appName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

// CheckApp refuses an app name that is not 1-100 letters, digits or
// ._:- starting with a letter or digit: blank, padded with spaces,
// holding a control or format character, or over-long. The library's
// Config, the drivers' Register and Transfer (the app a resource moves
// to) and the command's configs and owners sub-commands all use it, so
// that no path stores a name another path refuses (a catalog entry owned
// by "   " would lock every app out of what it guards).
func CheckApp(app string) error {
	if !appName.MatchString(app) {
		return fmt.Errorf("%w: %s must be 1-100 letters, digits or ._:- and start with a letter or digit", ErrInvalidApp, quoteName(app))
	}
	return nil
}

// quoteName quotes an app name for a message, cut to a printable length.
func quoteName(s string) string {
	if r := []rune(s); len(r) > 40 {
		return fmt.Sprintf("%q (%d characters)", string(r[:40])+"…", len(r))
	}
	return fmt.Sprintf("%q", s)
}
