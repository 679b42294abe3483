package mysql_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/mysql"
	"github.com/xadm/mensageria/driver/mysql/mysqltest"
)

// own records types as app's in the catalog, as its relay does at start.
func own(t *testing.T, d *mysql.Driver, app string, types ...string) {
	t.Helper()
	var rs []driver.Resource
	for _, typ := range types {
		rs = append(rs, driver.Resource{Kind: driver.ResourceType, Name: typ})
	}
	if _, err := d.Register(context.Background(), driver.RegisterParams{App: app, Resources: rs}); err != nil {
		t.Fatalf("Register(%s, %v): %v", app, types, err)
	}
}

// The statement docs/mysql.md gives apps in other languages is enqueued
// and delivered by a relay, which finds it by polling.
func TestPlainSQLInsertIsRelayed(t *testing.T) {
	d, _ := migrated(t)
	ctx := t.Context()
	own(t, d, "plain", "t")
	if _, err := d.DB().ExecContext(ctx, "INSERT INTO mensageria_outbox (type, `key`, payload) VALUES ('t', 'k', '{\"a\":1}')"); err != nil {
		t.Fatalf("plain insert: %v", err)
	}
	var mid string
	if err := d.DB().QueryRowContext(ctx, "SELECT message_id FROM mensageria_outbox").Scan(&mid); err != nil {
		t.Fatal(err)
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

// A plain INSERT the rules refuse fails with error 1644 and the
// documented message prefix; through the Go API the same refusal is
// typed.
func TestPlainSQLRefusalsAreSignals(t *testing.T) {
	d, _ := migrated(t)
	ctx := t.Context()
	own(t, d, "plain", "t")
	for _, c := range []struct{ values, want string }{
		{"('nobody.owns', 'k', '{}')", "has no owner app"},
		{"('t', '', '{}')", "the key is empty"},
		{"('t', 'k', 'not json')", "not a valid JSON document"},
	} {
		_, err := d.DB().ExecContext(ctx, "INSERT INTO mensageria_outbox (type, `key`, payload) VALUES "+c.values)
		if err == nil || !strings.Contains(err.Error(), "1644") || !strings.Contains(err.Error(), "mensageria: ") || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("INSERT %s: %v, want error 1644 with %q", c.values, err, c.want)
		}
	}
	_, err := d.DB().ExecContext(ctx, "INSERT INTO mensageria_outbox (type, `key`, headers) VALUES ('t', 'k', '{\"n\":1}')")
	if err == nil || !strings.Contains(err.Error(), "string value") {
		t.Fatalf("headers with a number: %v", err)
	}
	err = d.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{Type: "t", Key: "k", Payload: []byte(`{}`)}, {Type: "nobody.owns", Key: "k", Payload: []byte(`{}`)}}})
	var ue *driver.UnownedTypeError
	if !errors.As(err, &ue) || ue.Type != "nobody.owns" {
		t.Fatalf("Insert of an unowned type = %v, want an *UnownedTypeError naming it", err)
	}
	err = d.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{Type: "t", Key: strings.Repeat("k", 1001), Payload: []byte(`{}`)}}})
	var re *mysql.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "1000 bytes") {
		t.Fatalf("Insert of a long key = %v, want a *RefusedError about 1000 bytes", err)
	}
}

// Leadership is the lease row, not a connection: killing every connection
// of the leader's pool loses nothing, and the next round keeps the epoch.
func TestElectionSurvivesConnectionLoss(t *testing.T) {
	d, url := migrated(t)
	ctx := t.Context()
	el, err := d.Elector("app", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	epoch, leader, err := el.Acquire(ctx)
	if err != nil || !leader {
		t.Fatalf("Acquire = %d, %v, %v", epoch, leader, err)
	}
	admin := mysqltest.Admin(t)
	db := url[strings.LastIndex(url, "/")+1:]
	rows, err := admin.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()", db)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if len(ids) == 0 {
		t.Fatal("the leader's pool holds no connection to kill")
	}
	for _, id := range ids {
		if _, err := admin.ExecContext(ctx, "KILL CONNECTION ?", id); err != nil {
			t.Fatalf("KILL %d: %v", id, err)
		}
	}
	// A standby meanwhile finds the lease held.
	other := openT(t, url, nil)
	standby, _ := other.Elector("app", 10*time.Second)
	if _, lead, err := standby.Acquire(ctx); err != nil || lead {
		t.Fatalf("standby Acquire after the leader's connections died = %v, %v; want held", lead, err)
	}
	var again int64
	var still bool
	// The first use of a killed connection may fail; database/sql
	// discards it and the next round runs on a fresh one.
	for range 3 {
		if again, still, err = el.Acquire(ctx); err == nil {
			break
		}
	}
	if err != nil || !still || again != epoch {
		t.Fatalf("Acquire after the connections died = %d, %v, %v; want still leader at epoch %d", again, still, err, epoch)
	}
}

// Migrators started at once serialize on GET_LOCK: each succeeds, the
// schema is migrated once.
func TestConcurrentMigrate(t *testing.T) {
	url := mysqltest.Database(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	applied := make([]int, 4)
	for i := range errs {
		d := openT(t, url, nil)
		wg.Go(func() {
			res, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp, App: "owner"})
			errs[i], applied[i] = err, len(res.Applied)
		})
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
		total += applied[i]
	}
	d := openT(t, url, nil)
	res, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateCheck})
	if err != nil || res.To != res.Latest || res.Owner != "owner" {
		t.Fatalf("check after concurrent migrators = %+v, %v", res, err)
	}
	if total != res.Latest {
		t.Fatalf("the migrators applied %d migrations between them, want %d (each once)", total, res.Latest)
	}
}

func TestOpenRefusesBadConfig(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{"mysql://root@127.0.0.1:3306/", "name one database"},
		{"root@tcp(127.0.0.1:3306)/", "no database named"},
		{"postgres://x@h/db", "dsn"},
	} {
		d, err := mysql.Open(c.dsn, nil)
		if err == nil {
			_ = d.Close()
			t.Fatalf("Open(%q) succeeded", c.dsn)
		}
		if !errors.Is(err, driver.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("Open(%q) = %v, want a config error with %q", c.dsn, err, c.want)
		}
	}
	url := mysqltest.Database(t)
	if d, err := mysql.Open(url, &mysql.Config{Schema: strings.Repeat("s", 33)}); err == nil || !errors.Is(err, driver.ErrConfig) {
		if d != nil {
			_ = d.Close()
		}
		t.Fatalf("a 33-character schema: %v", err)
	}
}
