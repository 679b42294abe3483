// Package testdb gives tests a real PostgreSQL: one pool per test binary and
// a fresh schema per test, dropped when the test ends.
//
// The server is read from MENSAGERIA_TEST_DATABASE_URL (default: the local
// trust-auth server, database test). When it cannot be reached a test
// skips, except when CI is set: there a missing service is a failure.
package testdb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/mensageriatest/pgserver"
)

// EnvURL names the variable that points tests at PostgreSQL.
const EnvURL = "MENSAGERIA_TEST_DATABASE_URL"

// DefaultURL is used when EnvURL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns the configured test database URL.
func URL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

// EnvNatsURL names the variable that points tests at a nats-server with
// JetStream.
const EnvNatsURL = "MENSAGERIA_TEST_NATS_URL"

// NatsURL returns the configured test NATS URL (default the local server).
func NatsURL() string {
	if u := os.Getenv(EnvNatsURL); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

var (
	once    sync.Once
	pool    *pgxpool.Pool
	poolErr error
)

// Unavailable skips or fails t (under CI) because a service is missing.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is required when CI is set: %v", service, err)
	}
	t.Skipf("%s not reachable (%v); set CI=1 to make this a failure", service, err)
}

// Long skips a long test in a -short run (the quick loop while coding),
// never when CI is set: CI runs every test whatever its flags.
func Long(t testing.TB, what string) {
	t.Helper()
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skipf("%s: long, skipped with -short (CI runs it)", what)
	}
}

// Pool returns the shared pool, or skips/fails t when PostgreSQL is down.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	once.Do(connect)
	if poolErr != nil {
		Unavailable(t, "PostgreSQL at "+URL(), poolErr)
	}
	return pool
}

// Reachable returns why PostgreSQL cannot be reached, nil when it can:
// for a TestMain, which has no test to skip, deciding what its binary
// runs (Examples have no t).
func Reachable() error {
	once.Do(connect)
	return poolErr
}

// connect opens the shared pool once per test binary.
func connect() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		poolErr = err
		return
	}
	cfg.MaxConns = 32
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = p.Ping(ctx)
	}
	pool, poolErr = p, err
}

// Schema creates an empty, uniquely named schema for t and drops it (with
// everything in it) when t ends. It returns the schema's name.
func Schema(t testing.TB) string {
	t.Helper()
	p := Pool(t)
	name := fmt.Sprintf("mt_%s_%08x", sanitize(t.Name()), rand.Uint32())
	ctx := context.Background()
	if _, err := p.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", name, err)
		}
	})
	return name
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 30 {
			break
		}
	}
	return b.String()
}

// PrivateServer starts a private PostgreSQL server (pgserver.Start) for t
// and stops it when t ends: for a test that must crash, restart or
// reconfigure its server, which it may never do to the shared one. Without
// the server programs t is skipped, or fails when CI is set.
func PrivateServer(t testing.TB, cfg pgserver.Config) *pgserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := pgserver.Start(ctx, cfg)
	if err != nil {
		if errors.Is(err, pgserver.ErrNoPostgres) {
			Unavailable(t, "the PostgreSQL server programs", err)
		}
		t.Fatalf("private PostgreSQL server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Logf("private PostgreSQL server: stop: %v", err)
		}
	})
	return s
}

// Role creates a login role of t's own, no superuser, named prefix and a
// random suffix, and drops it (and every grant it holds) when t ends:
// roles are global to the server, which other tests share. It returns the
// role's name.
func Role(t testing.TB, prefix string) string {
	t.Helper()
	p := Pool(t)
	name := fmt.Sprintf("%s_%08x", sanitize(prefix), rand.Uint32())
	ctx := context.Background()
	if _, err := p.Exec(ctx, "CREATE ROLE "+name+" LOGIN NOSUPERUSER"); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = p.Exec(ctx, "DROP OWNED BY "+name)
		if _, err := p.Exec(ctx, "DROP ROLE "+name); err != nil {
			t.Logf("drop role %s: %v", name, err)
		}
	})
	return name
}

// URLAs returns the test database URL with role as its user (the shared
// server trusts local connections).
func URLAs(t testing.TB, role string) string {
	t.Helper()
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}
