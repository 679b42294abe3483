//go:build !unix

package bench

import (
	"context"
	"errors"
)

// ErrNoPostgres means the PostgreSQL server programs were not found.
var ErrNoPostgres = errors.New("bench: a private PostgreSQL server is started on Unix systems only")

// PostgresServerConfig configures StartPostgres.
type PostgresServerConfig struct {
	BinDir   string
	Settings map[string]string
}

// PostgresServer is a running private server.
type PostgresServer struct {
	URL string
	Dir string
}

// StartPostgres is not available on this system.
func StartPostgres(context.Context, PostgresServerConfig) (*PostgresServer, error) {
	return nil, ErrNoPostgres
}

// Stop does nothing.
func (s *PostgresServer) Stop() error { return nil }
