package m2mhttp

import (
	"bytes"
	"context"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

const openAPIPath = "../../docs/openapi.yaml"

var (
	contractOnce sync.Once
	contractDoc  *openapi3.T
	contractErr  error
)

// contract loads docs/openapi.yaml once per test binary.
func contract(t testing.TB) (*openapi3.T, *routers.Route) {
	t.Helper()
	contractOnce.Do(func() {
		l := openapi3.NewLoader()
		contractDoc, contractErr = l.LoadFromFile(openAPIPath)
		if contractErr == nil {
			contractErr = contractDoc.Validate(context.Background())
		}
	})
	if contractErr != nil {
		t.Fatalf("docs/openapi.yaml: %v", contractErr)
	}
	item := contractDoc.Paths.Value(contractPath)
	if item == nil || item.Post == nil {
		t.Fatalf("docs/openapi.yaml has no paths[%q].post", contractPath)
	}
	return contractDoc, &routers.Route{Spec: contractDoc, Path: contractPath, PathItem: item, Method: http.MethodPost, Operation: item.Post}
}

// contractPath is where the contract writes its one operation, deliver: a
// receiver serves it at a URL of its own.
const contractPath = "/"

// batchRoute is the contract's operation, which takes batches by their
// media type.
func batchRoute(t testing.TB) *routers.Route {
	t.Helper()
	_, route := contract(t)
	return route
}

// routeOf picks the contract's operation, which tells single deliveries
// and batches apart by the media type, as the receiver does.
func routeOf(t testing.TB, r *http.Request) *routers.Route {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == ContentTypeBatch {
		return batchRoute(t)
	}
	_, route := contract(t)
	return route
}

// conforms wraps h so that every exchange it serves is checked against
// the contract: each response always, and the request whenever the
// receiver accepted it (a refused request is wrong on purpose).
func conforms(t testing.TB, h http.Handler) http.Handler {
	contract(t)
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
		checkExchange(t, routeOf(t, r), r, body, rec.Code, rec.Header(), rec.Body.Bytes())
	})
}

func checkExchange(t testing.TB, route *routers.Route, r *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) {
	t.Helper()
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: req, Route: route, Options: opts}
	// A batch is taken (200) even when some of its envelopes are
	// malformed; those are refused in their results, and the request
	// conforms only when none is.
	if status == http.StatusOK && !bytes.Contains(respBody, []byte(ProblemMalformed)) {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("accepted request does not conform to docs/openapi.yaml: %v\nbody: %s", err, reqBody)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: opts}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("response %d does not conform to docs/openapi.yaml: %v\nbody: %s", status, err, respBody)
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
