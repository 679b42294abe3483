package mensageria_test

import "testing"

// sqliteBackend is wired once the SQLite driver lands.
func sqliteBackend(t *testing.T) *backend { return nil }
