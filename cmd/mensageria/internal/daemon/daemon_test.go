package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xadm/mensageria/driver"
)

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%v (%T) carries no exit code", err, err)
	}
	return e.Code
}

func TestNewLoggerRefusesUnknownFormatAndLevel(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "database", "postgres://app:s3cret@db/x")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"msg":"shown"`) || strings.Contains(out, "s3cret") {
		t.Fatalf("log %q: want the warning only, its URL's password redacted", out)
	}
	for _, c := range []struct{ format, level, want string }{
		{"xml", "info", "--log-format"},
		{"text", "loud", "--log-level"},
	} {
		_, err := NewLogger(io.Discard, c.format, c.level)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(t, err) != ExitUsage {
			t.Fatalf("%s/%s: %v, want a usage error naming %s", c.format, c.level, err, c.want)
		}
	}
}

// A command that acts on a database someone else created never creates a
// missing SQLite file; a daemon does, and the schema check then says the
// schema is behind, or brings it up.
func TestOpenSQLiteAndCheckSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	_, err := OpenPinged(ctx, "sqlite:"+path, "mensageria", false)
	if err == nil || !strings.Contains(err.Error(), "the file does not exist") || exitCode(t, err) != ExitFailure {
		t.Fatalf("open without create: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused open left a file: %v", err)
	}
	b, err := OpenPinged(ctx, "sqlite:"+path, "mensageria", true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.SQL == nil || b.Pool != nil || b.IsPostgres() || b.InboxNotifier() != nil {
		t.Fatalf("SQLite's DB: SQL %v, Pool %v, postgres %v", b.SQL, b.Pool, b.IsPostgres())
	}
	if _, err := b.GrantSQL("relay", "r", "a"); !errors.Is(err, ErrNotPostgres) {
		t.Fatalf("GrantSQL on SQLite: %v", err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	err = CheckSchema(ctx, b, "mensageria", "pedidos", false, "run 'mensageria migrate up'", log)
	if err == nil || !strings.Contains(err.Error(), "schema mensageria is at version 0") || !strings.HasSuffix(err.Error(), ": run 'mensageria migrate up'") || exitCode(t, err) != ExitFailure {
		t.Fatalf("check of an empty file: %v", err)
	}
	if err := CheckSchema(ctx, b, "mensageria", "pedidos", true, "", log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "schema migrated") {
		t.Fatalf("the migration was not logged: %s", logs.String())
	}
	if err := CheckSchema(ctx, b, "mensageria", "pedidos", false, "", log); err != nil {
		t.Fatalf("check after up: %v", err)
	}
}

func TestOpenRefusesABadURL(t *testing.T) {
	_, err := Open(context.Background(), "postgres://h:notaport/db", "mensageria", true)
	if err == nil || !strings.HasPrefix(err.Error(), "database: ") || exitCode(t, err) != ExitUsage {
		t.Fatalf("%v, want a usage error", err)
	}
}

func TestHealthMuxAndProbe(t *testing.T) {
	var notReady error
	detail := "route x (t): paused\n"
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "m 1\n") })
	srv := httptest.NewServer(HealthMux(func(context.Context) error { return notReady }, func() string { return detail }, metrics))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 200 || body != "ready\n"+detail {
		t.Fatalf("/readyz %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || body != "m 1\n" {
		t.Fatalf("/metrics %d %q", code, body)
	}
	client := &http.Client{}
	if err := Probe(context.Background(), client, srv.URL+"/readyz"); err != nil {
		t.Fatal(err)
	}
	notReady = fmt.Errorf("dial postgres://app:s3cret@db/x: refused")
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: dial") || strings.Contains(body, "s3cret") {
		t.Fatalf("/readyz %d %q: want 503, the reason, no password", code, body)
	}
	err := Probe(context.Background(), client, srv.URL+"/readyz")
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "not ready") || exitCode(t, err) != ExitFailure {
		t.Fatalf("probe of a 503: %v", err)
	}
	if err := Probe(context.Background(), client, "://nourl"); err == nil || exitCode(t, err) != ExitUsage {
		t.Fatalf("probe of a non-URL: %v", err)
	}
}

func TestServeHealthRefusesABusyAddress(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	srv, done, err := ServeHealth("", nil, log)
	if srv != nil || done == nil || err != nil {
		t.Fatalf("empty listen: %v %v %v", srv, done, err)
	}
	busy := httptest.NewServer(http.NotFoundHandler())
	defer busy.Close()
	_, _, err = ServeHealth(strings.TrimPrefix(busy.URL, "http://"), http.NotFoundHandler(), log)
	if err == nil || !strings.HasPrefix(err.Error(), "--listen ") || exitCode(t, err) != ExitUsage {
		t.Fatalf("busy address: %v", err)
	}
}

func TestPrivilegeOf(t *testing.T) {
	denied := func(msg string) error {
		return fmt.Errorf("retry: %w", &pgconn.PgError{Code: "42501", Message: msg})
	}
	cases := []struct {
		err                error
		command, privilege string
		object             string
	}{
		{denied("permission denied for table outbox"), "dead retry", "UPDATE", "table mensageria.outbox"},
		{denied(`permission denied for schema mensageria`), "migrate up", "CREATE and USAGE", "schema mensageria"},
		{denied("must be owner of table outbox"), "migrate up", "ownership", "table mensageria.outbox"},
		{denied("new row violates row-level security policy"), "enqueue", "a privilege", "an object of schema mensageria"},
	}
	for _, c := range cases {
		pe := PrivilegeOf(c.err, c.command, "mensageria")
		if pe == nil || pe.Privilege != c.privilege || pe.Object != c.object || pe.Command != c.command {
			t.Fatalf("%v: %+v, want %s on %s", c.err, pe, c.privilege, c.object)
		}
	}
	if pe := PrivilegeOf(&pgconn.PgError{Code: "23505"}, "enqueue", "mensageria"); pe != nil {
		t.Fatalf("a unique violation read as a privilege: %+v", pe)
	}
	if pe := PrivilegeOf(driver.ErrSchemaBehind, "status", "mensageria"); pe != nil {
		t.Fatalf("a plain error read as a privilege: %+v", pe)
	}
}

func TestCheckOTLPEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, bad := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://c:4317"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
	} {
		if err := checkOTLPEnv(env(bad)); err == nil || exitCode(t, err) != ExitUsage {
			t.Fatalf("%v: %v, want a usage error", bad, err)
		}
	}
	good := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318/", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
	if err := checkOTLPEnv(env(good)); err != nil {
		t.Fatal(err)
	}
	if got := otlpEndpoint(env(good)); got != "https://c:4318/v1/traces" {
		t.Fatalf("endpoint %q", got)
	}
	tr, err := StartTracing(context.Background(), false, "s", "a", func(string) (string, bool) { return "", false }, slog.New(slog.DiscardHandler))
	if err != nil || tr.Tracer != nil {
		t.Fatalf("tracing off: %+v %v", tr, err)
	}
	tr.Stop(0, nil)
}
