package postgres

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/pgserver"
	"github.com/xadm/mensageria/internal/testdb"
)

// A receiver's transaction survives a server crash once InTx returned,
// on a session whose synchronous_commit is off: the receiver acknowledges
// what InTx committed and the sender settles its row for good, so an
// effect lost after its acknowledgement would be lost for good. (The
// chaos suite found this: a crash between the receiver's asynchronous
// commit and the relay's settle, made after the restart, lost the
// effect.) The same session's plain asynchronous commit, made after it,
// is lost: the crash is one that loses what was not flushed.
func TestInTxCommitsDurablyOnAnAsynchronousSession(t *testing.T) {
	testdb.Long(t, "private PostgreSQL server")
	s := testdb.PrivateServer(t, pgserver.Config{Settings: map[string]string{"autovacuum": "off"}})
	ctx := context.Background()
	open := func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return pool
	}
	pool := open()
	d, err := New(pool, &Config{Schema: "durable"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE durable.effects (v text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	release, err := s.HoldWAL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var inTxSetting string
	err = d.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		if _, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "c", Key: "k", MessageID: uuid.New()}); err != nil {
			return err
		}
		raw := tx.Raw().(pgx.Tx)
		if err := raw.QueryRow(ctx, "SHOW synchronous_commit").Scan(&inTxSetting); err != nil {
			return err
		}
		_, err := raw.Exec(ctx, "INSERT INTO durable.effects VALUES ('applied in InTx')")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var outside string
	if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&outside); err != nil || inTxSetting != "on" || outside != "off" {
		t.Fatalf("synchronous_commit inside InTx %q, after it %q (%v); want on, then the session's off again", inTxSetting, outside, err)
	}
	// After InTx, whose flush would write it out too.
	if _, err := pool.Exec(ctx, "INSERT INTO durable.effects VALUES ('plain asynchronous')"); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if err := s.Crash(); err != nil {
		t.Fatal(err)
	}
	release()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pool = open()
	defer pool.Close()
	rows, err := pool.Query(ctx, "SELECT v FROM durable.effects ORDER BY v")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var records int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM durable.inbox WHERE consumer = 'c' AND key = 'k'").Scan(&records); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "applied in InTx" || records != 1 {
		t.Fatalf("after the crash: effects %q, %d dedup records; want only InTx's effect and its record kept", got, records)
	}
}
