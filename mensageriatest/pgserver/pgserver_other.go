//go:build !unix

// Package pgserver runs a private PostgreSQL server; on this system it is
// not available.
package pgserver

import (
	"context"
	"errors"

	"github.com/xadm/mensageria/mensageriatest/serverproc"
)

// ErrNoPostgres means the PostgreSQL server programs were not found.
var ErrNoPostgres = errors.New("pgserver: a private PostgreSQL server is started on Unix systems only")

// ErrDown is returned by the methods that need a running server.
var ErrDown = serverproc.ErrDown

// EnvBin names the variable that points at the directory of initdb and
// postgres.
const EnvBin = "MENSAGERIA_PG_BIN"

// Config configures Start.
type Config struct {
	BinDir   string
	Settings map[string]string
}

// Server is a private server.
type Server struct {
	URL  string
	Dir  string
	Port int
}

// Start is not available on this system.
func Start(context.Context, Config) (*Server, error) { return nil, ErrNoPostgres }

func (s *Server) URLFor(user, database string) string     { return "" }
func (s *Server) LogPath() string                         { return "" }
func (s *Server) Start(context.Context) error             { return ErrDown }
func (s *Server) Crash() error                            { return ErrDown }
func (s *Server) Shutdown() error                         { return ErrDown }
func (s *Server) Restart(context.Context) error           { return ErrDown }
func (s *Server) Running() bool                           { return false }
func (s *Server) Starts() int                             { return 0 }
func (s *Server) HoldWAL(context.Context) (func(), error) { return nil, ErrDown }
func (s *Server) Stop() error                             { return nil }
