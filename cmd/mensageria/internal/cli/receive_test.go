package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/internal/m2mattack"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// rbackend is the receiving app's database in a test: PostgreSQL (a schema
// of the test's own) or an SQLite file.
type rbackend struct {
	name     string
	database string
	schema   string
	// table qualifies a table of the schema.
	table func(string) string
	// exec and count run SQL as the app would, with $1.. or ? parameters
	// written as {1}, {2}.. (each backend's own placeholder is put in).
	db    *sql.DB       // SQLite
	pg    *pgxPoolLike  // PostgreSQL
	drv   driver.Driver // for the catalog
	close func()
}

type pgxPoolLike struct {
	exec  func(ctx context.Context, q string, args ...any) error
	count func(ctx context.Context, q string, args ...any) (int, error)
}

var placeholder = regexp.MustCompile(`\{(\d+)\}`)

func (b *rbackend) sql(q string) string {
	q = strings.ReplaceAll(q, "{s}.", strings.TrimSuffix(b.table("x"), "x"))
	if b.db != nil {
		return placeholder.ReplaceAllString(q, "?$1")
	}
	return placeholder.ReplaceAllString(q, "$$$1")
}

func (b *rbackend) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	var err error
	if b.db != nil {
		_, err = b.db.ExecContext(context.Background(), b.sql(q), args...)
	} else {
		err = b.pg.exec(context.Background(), b.sql(q), args...)
	}
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (b *rbackend) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	var err error
	if b.db != nil {
		err = b.db.QueryRowContext(context.Background(), b.sql(q), args...).Scan(&n)
	} else {
		n, err = b.pg.count(context.Background(), b.sql(q), args...)
	}
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func pgBackend(t *testing.T) *rbackend {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return &rbackend{
		name: "postgres", database: testdb.URL(), schema: schema,
		table: func(n string) string { return schema + "." + n },
		pg: &pgxPoolLike{
			exec: func(ctx context.Context, q string, args ...any) error {
				_, err := pool.Exec(ctx, q, args...)
				return err
			},
			count: func(ctx context.Context, q string, args ...any) (int, error) {
				var n int
				err := pool.QueryRow(ctx, q, args...).Scan(&n)
				return n, err
			},
		},
		drv: drv, close: func() {},
	}
}

func sqliteBackend(t *testing.T) *rbackend {
	path := filepath.Join(t.TempDir(), "app.db")
	drv, err := sqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drv.Close() })
	return &rbackend{
		name: "sqlite", database: "sqlite:" + path, schema: "mensageria",
		table: func(n string) string { return "mensageria_" + n },
		db:    drv.DB(), drv: drv, close: func() {},
	}
}

// eachReceiveBackend runs f on PostgreSQL and on SQLite.
func eachReceiveBackend(t *testing.T, f func(t *testing.T, b *rbackend)) {
	t.Run("postgres", func(t *testing.T) { f(t, pgBackend(t)) })
	t.Run("sqlite", func(t *testing.T) { f(t, sqliteBackend(t)) })
}

// rdaemon is a `mensageria receive` running in the test's process.
type rdaemon struct {
	url    string // the delivery URL (scheme, address, path)
	addr   string
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan int
}

var receivingLog = regexp.MustCompile(`"msg":"receiving","addr":"([^"]+)","url":"([^"]+)"`)

// receiveConfig writes a receive config on b: the consumer "fat" takes
// pedido.criado and pedido.cancelado; extra is added to the receive:
// block, each line indented by the caller.
func receiveConfig(t *testing.T, b *rbackend, extra string, window string) string {
	t.Helper()
	if window == "" {
		window = "1h"
	}
	return writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: faturamento
receive:
  listen: 127.0.0.1:0
%s
consumers:
  - name: fat
    types: [pedido.criado, pedido.cancelado]
    window: %s
`, b.database, b.schema, extra, window))
}

// startReceive runs `mensageria receive --migrate` on config until the
// test ends (or stop), and waits until it listens.
func startReceive(t *testing.T, config string, env map[string]string, args ...string) *rdaemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &rdaemon{logs: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	argv := append([]string{"receive", "--config", config, "--migrate", "--log-format", "json", "--log-level", "debug"}, args...)
	go func() {
		d.done <- Run(ctx, argv, IO{Out: io.Discard, Err: d.logs, Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			t.Error("receive did not stop")
		}
	})
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		if m := receivingLog.FindStringSubmatch(d.logs.String()); m != nil {
			d.addr, d.url = m[1], m[2]
			return true
		}
		select {
		case code := <-d.done:
			d.done <- code
			t.Fatalf("receive exited %d:\n%s", code, d.logs.String())
		default:
		}
		return false
	}, "receive to start:\n%s", d.logs)
	return d
}

// stop ends the daemon as SIGTERM does and returns its exit code.
func (d *rdaemon) stop(t *testing.T) int {
	t.Helper()
	d.cancel()
	select {
	case code := <-d.done:
		d.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("receive ignored the stop")
		return -1
	}
}

type ranswer struct {
	status  int
	header  http.Header
	body    string
	problem m2mhttp.Problem
}

func sendTo(t *testing.T, c *http.Client, method, url string, header http.Header, body string) ranswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := ranswer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		if err := json.Unmarshal(b, &a.problem); err != nil {
			t.Fatalf("problem %s: %v", b, err)
		}
	}
	return a
}

func deliver(t *testing.T, url, token, body string) ranswer {
	t.Helper()
	return deliverWith(t, nil, url, token, "application/json", body)
}

func deliverWith(t *testing.T, c *http.Client, url, token, contentType, body string) ranswer {
	t.Helper()
	h := http.Header{}
	h.Set("Content-Type", contentType)
	h.Set("X-Request-Id", "test-rid")
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return sendTo(t, c, http.MethodPost, url, h, body)
}

func envelope(t *testing.T, typ, key, payload string, created time.Time) (string, uuid.UUID) {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	b, err := m2mhttp.EncodeEnvelope(&mensageria.Delivery{ID: id, Type: typ, Key: key, Payload: json.RawMessage(payload), CreatedAt: created, Attempt: 1,
		Headers: map[string]string{"traceparent": "00-" + key}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b), id
}

func batchBody(envs ...string) string { return `{"messages":[` + strings.Join(envs, ",") + `]}` }

func metricsOf(t *testing.T, url string) string {
	t.Helper()
	a := sendTo(t, nil, http.MethodGet, url, http.Header{}, "")
	if a.status != 200 {
		t.Fatalf("GET %s: %d %s", url, a.status, a.body)
	}
	return a.body
}

// The daemon on each backend: duplicates absorbed at the door, conflicts
// and stale messages refused as such, every attack of the M2M contract
// refused with its problem answer and nothing stored, the probes, the
// counts on /metrics, and a graceful stop.
func TestReceiveAtTheDoor(t *testing.T) {
	eachReceiveBackend(t, func(t *testing.T, b *rbackend) {
		cfg := receiveConfig(t, b, "  path: /m2m\n  tokens: [new-token-0123456789, old-token-0123456789]\n  max_body_bytes: 4096\n  max_batch_items: 3", "1h")
		d := startReceive(t, cfg, nil)
		stored := func() int {
			return b.count(t, "SELECT count(*) FROM {s}.inbox_queue") + b.count(t, "SELECT count(*) FROM {s}.inbox")
		}

		good, _ := envelope(t, "pedido.criado", "p-1", `{"total":10}`, time.Now())
		for _, c := range append(m2mattack.Single(good, "pedido.criado", "p-1", "new-token-0123456789", 4096), m2mattack.Batch(good, "new-token-0123456789", 4096, 3)...) {
			method, header, body := c.Request("new-token-0123456789")
			a := sendTo(t, nil, method, d.url, header, body)
			if a.status != c.Status || a.problem.Type != c.Problem || a.problem.Status != c.Status {
				t.Errorf("%s: got %d %s, want %d %s", c.Name, a.status, a.body, c.Status, c.Problem)
			}
		}
		if n := stored(); n != 0 {
			t.Fatalf("bad requests stored %d rows", n)
		}

		if a := deliver(t, d.url, "new-token-0123456789", good); a.status != 200 || a.body != `{"status":"applied"}` {
			t.Fatalf("first delivery: %d %s", a.status, a.body)
		}
		for _, tok := range []string{"new-token-0123456789", "old-token-0123456789"} {
			if a := deliver(t, d.url, tok, good); a.status != 200 || a.body != `{"status":"duplicate"}` {
				t.Fatalf("redelivery with %s: %d %s", tok, a.status, a.body)
			}
		}
		// A new message under the same key and document: a duplicate; with
		// another document: a conflict, and nothing stored either way.
		same, _ := envelope(t, "pedido.criado", "p-1", `{"total": 10}`, time.Now())
		if a := deliver(t, d.url, "new-token-0123456789", same); a.body != `{"status":"duplicate"}` {
			t.Fatalf("same key and payload, new id: %d %s", a.status, a.body)
		}
		other, _ := envelope(t, "pedido.criado", "p-1", `{"total":11}`, time.Now())
		if a := deliver(t, d.url, "new-token-0123456789", other); a.status != 409 || a.problem.Type != m2mhttp.ProblemConflict {
			t.Fatalf("conflict: %d %s", a.status, a.body)
		}
		stale, _ := envelope(t, "pedido.criado", "p-old", `{}`, time.Now().Add(-2*time.Hour))
		if a := deliver(t, d.url, "new-token-0123456789", stale); a.status != 409 || a.problem.Type != m2mhttp.ProblemStale {
			t.Fatalf("stale: %d %s", a.status, a.body)
		}
		if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue"); n != 1 {
			t.Fatalf("%d rows after a delivery, its redeliveries, a conflict and a stale message; want 1", n)
		}

		// A batch: two new, one repeated, one of a type nobody takes.
		e2, _ := envelope(t, "pedido.criado", "p-2", `{}`, time.Now())
		e3, _ := envelope(t, "pedido.cancelado", "p-3", `{}`, time.Now())
		unknown, _ := envelope(t, "nota.fiscal", "nf-1", `{}`, time.Now())
		a := deliverWith(t, nil, d.url, "new-token-0123456789", m2mhttp.ContentTypeBatch, batchBody(e2, good, e3))
		var res struct{ Results []m2mhttp.BatchResult }
		if err := json.Unmarshal([]byte(a.body), &res); err != nil || a.status != 200 || len(res.Results) != 3 ||
			res.Results[0].Status != m2mhttp.ItemApplied || res.Results[1].Status != m2mhttp.ItemDuplicate || res.Results[2].Status != m2mhttp.ItemApplied {
			t.Fatalf("batch: %d %s", a.status, a.body)
		}
		if a := deliver(t, d.url, "new-token-0123456789", unknown); a.status != 422 || a.problem.Type != m2mhttp.ProblemUnknownType {
			t.Fatalf("unknown type: %d %s", a.status, a.body)
		}
		if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue WHERE consumer = 'fat' AND state = 'pending'"); n != 3 {
			t.Fatalf("%d pending rows, want 3", n)
		}
		if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue WHERE key = 'p-3' AND type = 'pedido.cancelado' AND CAST(headers AS TEXT) LIKE '%00-p-3%'"); n != 1 {
			t.Fatal("the batch's row lost its type or headers")
		}

		// Another path is not the delivery endpoint; the probes are.
		if a := deliver(t, strings.TrimSuffix(d.url, "/m2m")+"/other", "new-token-0123456789", good); a.status != 404 || a.problem.Status != 404 {
			t.Fatalf("POST to another path: %d %s", a.status, a.body)
		}
		base := "http://" + d.addr
		if a := sendTo(t, nil, http.MethodGet, base+"/healthz", http.Header{}, ""); a.status != 200 {
			t.Fatalf("healthz %d", a.status)
		}
		if a := sendTo(t, nil, http.MethodGet, base+"/readyz", http.Header{}, ""); a.status != 200 {
			t.Fatalf("readyz %d %s", a.status, a.body)
		}
		if a := deliver(t, base+"/readyz", "new-token-0123456789", good); a.status != 405 {
			t.Fatalf("POST to a probe: %d %s", a.status, a.body)
		}
		m := metricsOf(t, base+"/metrics")
		for _, want := range []string{
			`mensageria_receive_messages_total{app="faturamento",outcome="applied",type="pedido.criado"} 2`,
			`mensageria_receive_messages_total{app="faturamento",outcome="duplicate",type="pedido.criado"} 4`,
			`mensageria_receive_messages_total{app="faturamento",outcome="conflict",type="pedido.criado"} 1`,
			`mensageria_receive_messages_total{app="faturamento",outcome="stale",type="pedido.criado"} 1`,
			`mensageria_receive_conflicts_total{app="faturamento"} 1`,
			`mensageria_receive_requests_total{app="faturamento",code="401"}`,
			`mensageria_receive_requests_total{app="faturamento",code="422"}`,
			`mensageria_inbox_queue_pending{app="faturamento",consumer="fat"} 3`,
			`mensageria_receive_tokens{app="faturamento"} 2`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		// A window of 1h is under a default relay's retry horizon: said.
		if !strings.Contains(d.logs.String(), "shorter than the retry horizon") {
			t.Error("no warning about a window under the default retry horizon")
		}
		for _, secret := range []string{"new-token-0123456789", "old-token-0123456789"} {
			if strings.Contains(d.logs.String(), secret) {
				t.Errorf("%s reached the logs", secret)
			}
		}
		if code := d.stop(t); code != 0 || !strings.Contains(d.logs.String(), `"msg":"receive stopped"`) {
			t.Fatalf("stop: exit %d\n%s", code, d.logs.String())
		}
	})
}

// The consumers are the app's in the catalog: a consumer another app owns
// stops the daemon with exit 2 before it listens, naming both apps.
func TestReceiveRefusesAnotherAppsConsumer(t *testing.T) {
	eachReceiveBackend(t, func(t *testing.T, b *rbackend) {
		if _, err := b.drv.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.drv.Register(context.Background(), driver.RegisterParams{App: "cobranca",
			Resources: []driver.Resource{{Kind: driver.ResourceConsumer, Name: "fat", Window: time.Hour}}}); err != nil {
			t.Fatal(err)
		}
		cfg := receiveConfig(t, b, "  tokens: [tok-0123456789abcdef]", "1h")
		r := run(t, "", nil, "receive", "--config", cfg)
		if r.code != ExitUsage || !strings.Contains(r.err, `inbox consumer "fat" is owned by app "cobranca"`) || !strings.Contains(r.err, `"faturamento"`) {
			t.Fatalf("receive with another app's consumer: %+v", r)
		}
		// Its own consumers are recorded, with their windows.
		cfg = writeFile(t, strings.Replace(readFile(t, cfg), "name: fat", "name: fat2", 1))
		d := startReceive(t, cfg, nil)
		owners, err := b.drv.Owners(context.Background(), "faturamento")
		found := false
		for _, o := range owners {
			found = found || (o.Kind == driver.ResourceConsumer && o.Name == "fat2" && o.Window == time.Hour)
		}
		if err != nil || !found {
			t.Fatalf("the catalog after start: %+v %v", owners, err)
		}
		d.stop(t)
	})
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pgxConn opens a connection of the test's own (for LISTEN and for
// transactions an applier holds).
func pgxConn(t *testing.T) *pgx.Conn {
	t.Helper()
	testdb.Pool(t)
	c, err := pgx.Connect(context.Background(), testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
