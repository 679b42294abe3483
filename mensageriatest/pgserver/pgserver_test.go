//go:build unix

package pgserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest/pgserver"
)

// run runs sql on a new connection to s.
func run(t *testing.T, s *pgserver.Server, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func rows(t *testing.T, s *pgserver.Server) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	r, err := conn.Query(ctx, "SELECT v FROM t ORDER BY v")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// What the chaos suite's database faults rest on: a crash loses the
// asynchronous commits not yet written out and keeps every synchronous
// one; a fast restart keeps both; the server comes back on its port, and
// a session open across the crash is cut.
func TestCrashLosesOnlyAsynchronousCommits(t *testing.T) {
	testdb.Long(t, "private PostgreSQL server")
	// No autovacuum: nothing but the walwriter may write the WAL out while
	// it is held.
	s := testdb.PrivateServer(t, pgserver.Config{Settings: map[string]string{"autovacuum": "off"}})
	ctx := context.Background()
	if !strings.HasPrefix(s.URL, "postgres://postgres@127.0.0.1:") || s.Port == 5432 {
		t.Fatalf("URL %s, port %d: want a private port of 127.0.0.1", s.URL, s.Port)
	}
	run(t, s, "CREATE TABLE t (v text PRIMARY KEY)")
	run(t, s, "INSERT INTO t VALUES ('sync-1')")

	// A fast restart loses nothing, asynchronous commits included.
	run(t, s, "SET synchronous_commit = off; INSERT INTO t VALUES ('async-kept')")
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows(t, s), ","); got != "async-kept,sync-1" {
		t.Fatalf("after a fast restart: %s", got)
	}

	held, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	release, err := s.HoldWAL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	run(t, s, "SET synchronous_commit = off; INSERT INTO t VALUES ('async-lost')")
	if got := strings.Join(rows(t, s), ","); got != "async-kept,async-lost,sync-1" {
		t.Fatalf("before the crash, the asynchronous commit is visible: %s", got)
	}
	if err := s.Crash(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("running after Crash")
	}
	if _, err := held.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a session survived the crash")
	}
	if err := s.Crash(); !errors.Is(err, pgserver.ErrDown) {
		t.Fatalf("Crash of a stopped server: %v", err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows(t, s), ","); got != "async-kept,sync-1" {
		t.Fatalf("after the crash: %s; want the asynchronous commit made while the WAL was held lost, the rest kept", got)
	}
	if n := s.Starts(); n != 3 {
		t.Fatalf("%d starts, want 3", n)
	}

	// Under a synchronous commit nothing is lost, held WAL or not.
	release2, err := s.HoldWAL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release2()
	run(t, s, "INSERT INTO t VALUES ('sync-2')")
	if err := s.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows(t, s), ","); got != "async-kept,sync-1,sync-2" {
		t.Fatalf("after the second crash: %s", got)
	}
}

// The server refuses what it should refuse: a role that does not exist,
// and anything once stopped for good.
func TestStoppedForGood(t *testing.T) {
	testdb.Long(t, "private PostgreSQL server")
	s := testdb.PrivateServer(t, pgserver.Config{})
	ctx := context.Background()
	_, err := pgx.Connect(ctx, s.URLFor("nobody", "postgres"))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28000" {
		t.Fatalf("unknown role: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err == nil {
		t.Fatal("started after Stop")
	}
	if _, err := pgx.Connect(ctx, s.URL); err == nil {
		t.Fatal("connected after Stop")
	}
}
