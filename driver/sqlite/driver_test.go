package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
)

func migrated(t *testing.T, path string, cfg *sqlite.Config) *sqlite.Driver {
	t.Helper()
	d := openT(t, path, cfg)
	if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return d
}

// own records types as app's in the catalog, as its relay does at start.
func own(t *testing.T, d *sqlite.Driver, app string, types ...string) {
	t.Helper()
	var rs []driver.Resource
	for _, typ := range types {
		rs = append(rs, driver.Resource{Kind: driver.ResourceType, Name: typ})
	}
	if _, err := d.Register(context.Background(), driver.RegisterParams{App: app, Resources: rs}); err != nil {
		t.Fatalf("Register(%s, %v): %v", app, types, err)
	}
}

// The statement the README gives apps in other languages is enqueued and
// delivered by a relay.
func TestPlainSQLInsertIsRelayed(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	own(t, d, "plain", "t")
	if _, err := d.DB().ExecContext(ctx, `INSERT INTO mensageria_outbox (type, key, payload) VALUES ('t','k','{"a":1}')`); err != nil {
		t.Fatalf("plain insert: %v", err)
	}
	var mid string
	if err := d.DB().QueryRowContext(ctx, `SELECT message_id FROM mensageria_outbox`).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	if u, err := uuid.Parse(mid); err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 {
		t.Fatalf("default message_id %q is not a random RFC 4122 UUID (%v)", mid, err)
	}

	got := make(chan *mensageria.Delivery, 1)
	reg := mensageria.NewRegistry().MustRegister("t", mensageria.SenderFunc(func(_ context.Context, m *mensageria.Delivery) error {
		got <- m
		return nil
	}))
	c, err := mensageria.New(d, &mensageria.Config{App: "plain", Registry: reg, PollInterval: 50 * time.Millisecond, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(context.Background()) }()
	select {
	case m := <-got:
		if m.Key != "k" || string(m.Payload) != `{"a":1}` || m.ID.String() != mid || m.Attempt != 1 {
			t.Fatalf("delivered %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a plain SQL enqueue was not relayed")
	}
}

func TestPlainSQLInsertRejectsNonJSON(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	own(t, d, "plain", "t")
	_, err := d.DB().Exec(`INSERT INTO mensageria_outbox (type, key, payload) VALUES ('t','k','not json')`)
	if err == nil || !strings.Contains(err.Error(), "CHECK") {
		t.Fatalf("non-JSON payload: %v, want a CHECK constraint failure", err)
	}
	if _, err := d.DB().Exec(`INSERT INTO mensageria_outbox (type, key, payload) VALUES ('t','','{}')`); err == nil {
		t.Fatal("empty key accepted")
	}
}

func TestOpenBadPath(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		path, want string
	}{
		{filepath.Join(dir, "missing", "m.db"), "missing"},
		{"", "empty database path"},
		{filepath.Join(dir, "m.db?x=1"), "may not contain"},
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct{ path, want string }{filepath.Join(file, "m.db"), "not a directory"})
	for _, c := range cases {
		d, err := sqlite.Open(c.path, nil)
		if err == nil {
			_ = d.Close()
			t.Fatalf("Open(%q) succeeded", c.path)
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "mensageria/sqlite") {
			t.Fatalf("Open(%q) = %v, want an error mentioning %q", c.path, err, c.want)
		}
	}
	// A file that is not a database.
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if d, err := sqlite.Open(junk, nil); err == nil {
		_ = d.Close()
		t.Fatal("Open of a non-database file succeeded")
	} else if !strings.Contains(err.Error(), junk) {
		t.Fatalf("Open of a non-database file = %v, want the path in the error", err)
	} else {
		t.Logf("junk file: %v", err)
	}
	// A directory where the file should be.
	if d, err := sqlite.Open(dir, nil); err == nil {
		_ = d.Close()
		t.Fatal("Open of a directory succeeded")
	}
}

func TestOpenIsWAL(t *testing.T) {
	d := openT(t, filepath.Join(t.TempDir(), "m.db"), nil)
	var mode string
	var busy int
	if err := d.DB().QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := d.DB().QueryRow("PRAGMA busy_timeout").Scan(&busy); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || busy <= 0 {
		t.Fatalf("journal_mode %q busy_timeout %d, want wal and a timeout", mode, busy)
	}
}

func TestConfigSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	a := migrated(t, path, &sqlite.Config{Schema: "app_a"})
	b := migrated(t, path, nil)
	if a.Table("outbox") != "app_a_outbox" || b.Table("outbox") != "mensageria_outbox" {
		t.Fatalf("tables %s, %s", a.Table("outbox"), b.Table("outbox"))
	}
	ctx := t.Context()
	own(t, a, "a", "t")
	if err := a.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: uuid.New(), Type: "t", Key: "k", Payload: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	// Two prefixes in one file are two separate outboxes.
	if jobs, err := b.Claim(ctx, driver.ClaimParams{Types: []string{"t"}, Limit: 10, Lease: time.Minute, Token: 1}); err != nil || len(jobs) != 0 {
		t.Fatalf("other prefix claimed %d, %v", len(jobs), err)
	}
	if jobs, err := a.Claim(ctx, driver.ClaimParams{Types: []string{"t"}, Limit: 10, Lease: time.Minute, Token: 1}); err != nil || len(jobs) != 1 {
		t.Fatalf("own prefix claimed %d, %v", len(jobs), err)
	}
	for _, bad := range []string{"1abc", "a-b", "a b", "x;drop", strings.Repeat("a", 64)} {
		_, err := sqlite.Open(path, &sqlite.Config{Schema: bad})
		var ce *sqlite.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Schema" {
			t.Fatalf("Schema %q: %v, want a *ConfigError on Schema", bad, err)
		}
	}
}

func TestNewWithCallerDB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	plain, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.SetMaxOpenConns(1)
	var ce *sqlite.ConfigError
	if _, err := sqlite.New(plain, nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), "busy_timeout") {
		t.Fatalf("New without busy_timeout = %v, want a *ConfigError naming busy_timeout", err)
	}
	if _, err := sqlite.New(nil, nil); !errors.As(err, &ce) {
		t.Fatalf("New(nil) = %v", err)
	}

	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := sqlite.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.DB() != db {
		t.Fatal("DB() is not the caller's handle")
	}
	ctx := t.Context()
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	// The caller's handle has no _txlock: the driver's own writes must still
	// be immediate, so concurrent claimers and inserters never see BUSY.
	concurrentWriters(t, d, d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("Close closed the caller's DB: %v", err)
	}
}

// concurrentWriters runs inserters and claimers against each other; with
// immediate transactions and a busy timeout none may fail with SQLITE_BUSY.
func concurrentWriters(t *testing.T, a, b *sqlite.Driver) {
	t.Helper()
	ctx := t.Context()
	own(t, a, "writers", "c")
	const perWriter = 60
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 4 {
		d := []*sqlite.Driver{a, b}[w%2]
		wg.Go(func() {
			for i := range perWriter {
				err := d.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: uuid.New(), Type: "c", Key: fmt.Sprint(w, "-", i), Payload: []byte(`{}`)}}, Notify: true})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var mu sync.Mutex
	claimed := 0
	for w := range 2 {
		d := []*sqlite.Driver{a, b}[w%2]
		wg.Go(func() {
			deadline := time.Now().Add(90 * time.Second) // a bound for a hang, not a speed target
			for time.Now().Before(deadline) {
				jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{"c"}, Limit: 5, Lease: time.Minute, Token: int64(w + 1)})
				if err != nil {
					errs <- err
					return
				}
				var del []int64
				for _, j := range jobs {
					del = append(del, j.ID)
				}
				if len(del) > 0 {
					if res, err := d.Settle(ctx, driver.SettleParams{Token: int64(w + 1), Delivered: del}); err != nil || len(res.Settled) != len(del) {
						n := len(res.Settled)
						errs <- fmt.Errorf("settle %d of %d: %v", n, len(del), err)
						return
					}
				}
				mu.Lock()
				claimed += len(jobs)
				done := claimed >= 4*perWriter
				mu.Unlock()
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent writer: %v", err)
	}
	if claimed != 4*perWriter {
		t.Fatalf("claimed %d, want %d", claimed, 4*perWriter)
	}
}

func TestConcurrentWritersTwoHandles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	concurrentWriters(t, migrated(t, path, nil), openT(t, path, nil))
}

func TestSchemaAheadAndExternalTool(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	d := openT(t, path, nil)
	ctx := t.Context()
	// An owner applies the SQL with its own tool; the app only checks.
	ms, err := d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, err := d.DB().ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("applying migration %d by hand: %v", m.Version, err)
		}
	}
	res, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateCheck})
	if err != nil || res.To != len(ms) {
		t.Fatalf("check after an external apply = %+v, %v", res, err)
	}
	// A newer build migrated this database.
	if _, err := d.DB().ExecContext(ctx, "INSERT INTO mensageria_migrations (version, name) VALUES (999, 'future')"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []driver.MigrateMode{driver.MigrateCheck, driver.MigrateUp} {
		_, err := d.Migrate(ctx, driver.MigrateParams{Mode: mode})
		var ve *sqlite.SchemaVersionError
		if !errors.Is(err, driver.ErrSchemaAhead) || !errors.As(err, &ve) || ve.Have != 999 {
			t.Fatalf("mode %d on a newer schema: %v, want ErrSchemaAhead at 999", mode, err)
		}
	}
	if _, err := d.MigrationSQL(1000); err == nil {
		t.Fatal("MigrationSQL past the newest version succeeded")
	}
}

func TestClaimUsesTypeIndex(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	rows, err := d.DB().Query(`EXPLAIN QUERY PLAN SELECT id FROM mensageria_outbox o WHERE o.state = 'pending' AND o.type = ? AND o.available_at <= ? ORDER BY o.available_at, o.id LIMIT 10`, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	p := strings.Join(plan, "; ")
	if !strings.Contains(p, "mensageria_outbox_claim") || strings.Contains(p, "TEMP B-TREE") {
		t.Fatalf("claim plan %q: want the claim index and no sort", p)
	}
}

func TestClaimManyTypes(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	var types []string
	var rows []driver.InsertRow
	for i := range 450 { // past the per-type union limit
		typ := fmt.Sprintf("type-%03d", i)
		types = append(types, typ)
		if i%50 == 0 {
			rows = append(rows, driver.InsertRow{MessageID: uuid.New(), Type: typ, Key: "k", Payload: []byte(`{}`)},
				driver.InsertRow{MessageID: uuid.New(), Type: typ, Key: "k", Payload: []byte(`{}`)})
		}
	}
	own(t, d, "many", types...)
	if err := d.Insert(ctx, driver.InsertParams{Rows: rows}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{100, 450} {
		jobs, err := d.Claim(ctx, driver.ClaimParams{Types: types[:n], OrderedTypes: types[:50], Limit: 100, Lease: time.Minute, Token: 1})
		if err != nil {
			t.Fatalf("claim over %d types: %v", n, err)
		}
		// type-000 is ordered (one head of its key); every other type with
		// rows in range gives both.
		want := map[int]int{100: 1 + 2, 450: 2 * 7}[n]
		if len(jobs) != want {
			t.Fatalf("claim over %d types took %d rows, want %d", n, len(jobs), want)
		}
	}
}

func TestListenInProcess(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	own(t, d, "listen", "t")
	l, err := d.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// InsertTx wakes at once; the woken claim waits for the commit on the
	// write lock, so it sees the row.
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.InsertTx(ctx, tx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: uuid.New(), Type: "t", Key: "k", Payload: []byte(`{}`)}}, Notify: true}); err != nil {
		t.Fatal(err)
	}
	claimed := make(chan int, 1)
	go func() {
		<-l.C()
		jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{"t"}, Limit: 10, Lease: time.Minute, Token: 1})
		if err != nil {
			t.Error(err)
		}
		claimed <- len(jobs)
	}()
	// Let the woken claim reach the write lock before the commit: a claim
	// waiting on SQLite's busy handler shows no state to wait on.
	time.Sleep(100 * time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := <-claimed; n != 1 {
		t.Fatalf("claim woken by InsertTx got %d rows, want 1", n)
	}
	// Close ends every listener and refuses new ones.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-l.C(); ok {
		t.Fatal("listener still open after the driver closed")
	}
	if _, err := d.Listen(ctx); !errors.Is(err, sqlite.ErrClosed) {
		t.Fatalf("Listen after Close = %v, want ErrClosed", err)
	}
	_ = l.Close()
}

func TestElectorConfig(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	var ce *sqlite.ConfigError
	if _, err := d.Elector("", time.Second); !errors.As(err, &ce) {
		t.Fatalf("empty app: %v", err)
	}
	if _, err := d.Elector("a", 0); !errors.As(err, &ce) {
		t.Fatalf("zero lease: %v", err)
	}
	if _, err := d.Claim(t.Context(), driver.ClaimParams{Types: []string{"t"}, Limit: 1}); err == nil {
		t.Fatal("claim without a lease succeeded")
	}
}

func TestStaleCheckUsesDatabaseClock(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	// Just inside and just outside a one-minute window.
	for _, c := range []struct {
		age   time.Duration
		stale bool
	}{{50 * time.Second, false}, {70 * time.Second, true}} {
		err := d.InTx(t.Context(), func(ctx context.Context, tx driver.Tx) error {
			r, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "c", Key: c.age.String(), MessageID: uuid.New(), CreatedAt: time.Now().Add(-c.age), Window: time.Minute})
			if err == nil && r.Stale != c.stale {
				t.Errorf("age %s: stale %v, want %v", c.age, r.Stale, c.stale)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A database left at an older version by an earlier build is brought up by
// applying only what it lacks.
func TestMigrateUpgradesFromOlderVersion(t *testing.T) {
	d := openT(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	ms, err := d.MigrationSQL(0)
	if err != nil || len(ms) < 2 {
		t.Fatalf("MigrationSQL(0) = %d, %v; this test needs at least two migrations", len(ms), err)
	}
	if _, err := d.DB().ExecContext(ctx, ms[0].SQL); err != nil {
		t.Fatal(err)
	}
	res, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateCheck})
	var ve *sqlite.SchemaVersionError
	if !errors.Is(err, driver.ErrSchemaBehind) || !errors.As(err, &ve) || ve.Have != 1 || res.From != 1 {
		t.Fatalf("check at version 1 = %+v, %v", res, err)
	}
	res, err = d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp})
	if err != nil || res.From != 1 || res.To != len(ms) || len(res.Applied) != len(ms)-1 || res.Applied[0] != 2 {
		t.Fatalf("upgrade from 1 = %+v, %v", res, err)
	}
}

// Every setting the driver refuses is a *ConfigError that errors.Is
// matches against mensageria.ErrConfig, the one test a caller writes for
// a refused Config, driver setting or transport config alike.
func TestConfigErrorIsErrConfig(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	_, openErr := sqlite.Open("", nil)
	_, schemaErr := sqlite.Open(filepath.Join(t.TempDir(), "s.db"), &sqlite.Config{Schema: "a-b"})
	_, nilDBErr := sqlite.New(nil, nil)
	_, electorErr := d.Elector("a", 0)
	for name, err := range map[string]error{"empty path": openErr, "bad schema": schemaErr, "nil db": nilDBErr, "zero lease": electorErr} {
		var ce *sqlite.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, mensageria.ErrConfig) {
			t.Errorf("%s: %v, want a *ConfigError that is mensageria.ErrConfig", name, err)
		}
	}
}
