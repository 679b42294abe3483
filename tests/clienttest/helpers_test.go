package clienttest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// backend is one database under test: each call to open returns another
// driver on the same database, like another process would have.
type backend struct {
	name string
	open func() driver.Driver
	// exec runs raw SQL; table qualifies a table name.
	exec func(sql string, args ...any) error
	// insertID runs an INSERT of one row with RETURNING id appended.
	insertID func(sql string) (int64, error)
	count    func(sql string, args ...any) int
	table    func(string) string
	// begin opens a native transaction for EnqueueTx.
	begin func() (tx any, commit, rollback func() error)
	// execTx runs a statement inside an inbox transaction.
	execTx func(tx mensageria.Tx, sql string, args ...any) error
}

// backends returns every backend the core tests run on.
func backends(t *testing.T) []func(t *testing.T) *backend {
	return []func(t *testing.T) *backend{pgBackend, sqliteBackend, mysqlBackend}
}

func forEachBackend(t *testing.T, fn func(t *testing.T, b *backend)) {
	for _, mk := range backends(t) {
		b := mk(t)
		if b == nil {
			continue
		}
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

func pgBackend(t *testing.T) *backend {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	ctx := context.Background()
	open := func() driver.Driver {
		d, err := postgres.New(pool, &postgres.Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if _, err := open().Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	return &backend{
		name: "postgres",
		open: open,
		exec: func(sql string, args ...any) error { _, err := pool.Exec(ctx, sql, args...); return err },
		insertID: func(sql string) (id int64, err error) {
			return id, pool.QueryRow(ctx, sql+" RETURNING id").Scan(&id)
		},
		count: func(sql string, args ...any) int {
			var n int
			if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			return n
		},
		table: func(s string) string { return schema + "." + s },
		execTx: func(tx mensageria.Tx, sql string, args ...any) error {
			_, err := tx.Raw().(pgx.Tx).Exec(ctx, sql, args...)
			return err
		},
		begin: func() (any, func() error, func() error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
		},
	}
}

// own records types as app's in the ownership catalog, for tests that
// write rows without a Client (a driver Insert, raw SQL): the database
// refuses rows of a type no app owns.
func own(t interface {
	Helper()
	Fatal(...any)
}, d driver.Driver, app string, types ...string) {
	t.Helper()
	res := make([]driver.Resource, len(types))
	for i, typ := range types {
		res[i] = driver.Resource{Kind: driver.ResourceType, Name: typ}
	}
	if _, err := d.Register(context.Background(), driver.RegisterParams{App: app, Resources: res}); err != nil {
		t.Fatal(err)
	}
}

// logBuffer is a logger's output, safe to read while the relay writes.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// capture returns a logger writing to a buffer the test reads.
func capture() (*slog.Logger, *logBuffer) {
	lb := &logBuffer{}
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fastConfig is a Config with test-sized timings.
func fastConfig(app string, reg *mensageria.Registry) *mensageria.Config {
	return &mensageria.Config{
		App:          app,
		Registry:     reg,
		Lease:        time.Second,
		PollInterval: 20 * time.Millisecond,
		BackoffBase:  10 * time.Millisecond,
		BackoffMax:   50 * time.Millisecond,
		Logger:       quietLogger(),
	}
}

func uniqueApp(prefix string) string { return fmt.Sprintf("%s-%08x", prefix, rand.Uint32()) }

func newClient(t *testing.T, d driver.Driver, cfg *mensageria.Config) *mensageria.Client {
	t.Helper()
	c, err := mensageria.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func start(t *testing.T, c *mensageria.Client) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
}

// recorder is a Sender that records what it was given.
type recorder struct {
	mu   sync.Mutex
	got  []*mensageria.Delivery
	fail func(d *mensageria.Delivery) error
}

func (r *recorder) Send(ctx context.Context, d *mensageria.Delivery) error {
	if r.fail != nil {
		if err := r.fail(d); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.got = append(r.got, d)
	r.mu.Unlock()
	return nil
}

func (r *recorder) keys() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]int{}
	for _, d := range r.got {
		m[d.Key]++
	}
	return m
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}
