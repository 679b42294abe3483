//go:build race

package chaos

// raceEnabled shrinks the short profile: the race detector slows the
// in-process proxy and producers several times over.
const raceEnabled = true
