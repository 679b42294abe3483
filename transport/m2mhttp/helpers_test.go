package m2mhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// EnvOpenAPIRecord names a directory: when set, every exchange a
// receiver under conforms serves is written there, with the decoder's own
// rules, for the contract test of the command's module to check against
// docs/openapi.yaml with kin-openapi (a dependency this module keeps out of
// its go.mod). tests/openapi runs these tests so.
const EnvOpenAPIRecord = "MENSAGERIA_OPENAPI_RECORD"

// recordedExchange is one request and its answer, as conforms saw them.
type recordedExchange struct {
	Method         string      `json:"method"`
	URL            string      `json:"url"`
	Header         http.Header `json:"header"`
	Body           []byte      `json:"body"`
	Status         int         `json:"status"`
	ResponseHeader http.Header `json:"response_header"`
	ResponseBody   []byte      `json:"response_body"`
}

// decoderRules are the envelope rules the decoder holds, which the
// document must state: the contract test compares them with it.
type decoderRules struct {
	Required   []string `json:"required"`
	Fields     []string `json:"fields"`
	MaxTypeLen int      `json:"max_type_len"`
	MaxKeyLen  int      `json:"max_key_len"`
	// MinCreatedAt is the earliest created_at accepted, RFC 3339.
	MinCreatedAt string `json:"min_created_at"`
}

var writeRulesOnce sync.Once

// conforms wraps h so that every exchange it serves is recorded for the
// contract test when EnvOpenAPIRecord is set; otherwise it is h.
func conforms(t testing.TB, h http.Handler) http.Handler {
	dir := os.Getenv(EnvOpenAPIRecord)
	if dir == "" {
		return h
	}
	writeRulesOnce.Do(func() {
		rules := decoderRules{Required: requiredFields, Fields: slices.Sorted(maps.Keys(envelopeFields)), MaxTypeLen: maxTypeLen, MaxKeyLen: maxKeyLen,
			MinCreatedAt: MinCreatedAt.Format(time.RFC3339)}
		writeJSON(t, filepath.Join(dir, "rules.json"), rules)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		f, err := os.CreateTemp(dir, "exchange-*.json")
		if err != nil {
			t.Error(err)
			return
		}
		_ = f.Close()
		writeJSON(t, f.Name(), recordedExchange{Method: r.Method, URL: r.URL.RequestURI(), Header: r.Header, Body: body,
			Status: rec.Code, ResponseHeader: rec.Header(), ResponseBody: rec.Body.Bytes()})
	})
}

func writeJSON(t testing.TB, path string, v any) {
	b, err := json.Marshal(v)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		t.Errorf("recording for the contract test: %v", err)
	}
}

// pg returns a migrated PostgreSQL driver in a fresh schema.
func pg(t testing.TB) (*postgres.Driver, *pgxpool.Pool, string) {
	t.Helper()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	return drv, pool, schema
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// newBilling sets up the receiving app of the end-to-end tests: an effects
// table and the "billing" inbox, and the effect that records one row per
// applied message.
func newBilling(t testing.TB, drv *postgres.Driver, pool *pgxpool.Pool, schema string) (*mensageria.Inbox, mensageria.Effect) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), "CREATE TABLE "+schema+".effects (key text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	inbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	return inbox, func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO "+schema+".effects (key) VALUES ($1)", d.Key)
		return err
	}
}
