//go:build unix

package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest/pgserver"
)

// crashServer is a private server to crash and a schema on it, migrated
// up, with open making a pool whose every session commits asynchronously
// (an operator's choice for speed) and a driver on it. The migration is
// checkpointed, so a crash takes nothing of it.
func crashServer(t *testing.T, schema string) (*pgserver.Server, func() (*pgxpool.Pool, *postgres.Driver)) {
	t.Helper()
	testdb.Long(t, "private PostgreSQL server")
	srv := testdb.PrivateServer(t, pgserver.Config{Settings: map[string]string{"autovacuum": "off"}})
	ctx := context.Background()
	setup, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	_ = setup.Close(ctx)
	open := func() (*pgxpool.Pool, *postgres.Driver) {
		pool, err := pgxpool.New(ctx, srv.URL+"&synchronous_commit=off")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		d, err := postgres.New(pool, &postgres.Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return pool, d
	}
	pool, d := open()
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	return srv, open
}

// The relay commits its claims and settles asynchronously (a lost one is a
// redelivery), but two of its writes must outlive a server crash whatever
// the connection string or the server says of synchronous_commit: an
// election's epoch, or the crash hands the same epoch to the next leader
// and both pass the claim's fence; and the app's registration, or after
// the crash its types have no owner and another app may take them while
// this app's relay goes on claiming their rows. The WAL writer is held, so
// that nothing but a synchronous commit writes them out before the crash.
func TestEpochAndRegistrationSurviveACrash(t *testing.T) {
	const schema = "crash"
	srv, open := crashServer(t, schema)
	ctx := context.Background()
	pool, d := open()

	release, err := srv.HoldWAL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := d.Register(ctx, driver.RegisterParams{App: "first", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "order.created"}}}); err != nil {
		t.Fatal(err)
	}
	// A lease shorter than the crash and restart: the next leader takes
	// the election over as soon as it asks.
	el, err := d.Elector("first", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	epoch, ok, err := el.Acquire(ctx)
	if err != nil || !ok {
		t.Fatalf("Acquire: %d %v %v", epoch, ok, err)
	}
	// An asynchronous commit after both, which the crash must take: the
	// WAL was indeed held.
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".canary ()"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}

	pool2, d2 := open()
	var canary bool
	if err := pool2.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", schema+".canary").Scan(&canary); err != nil {
		t.Fatal(err)
	}
	if canary {
		t.Fatal("an asynchronous commit made while the WAL was held survived the crash: the test proves nothing")
	}
	// Another app asks for the type: the catalog still names its owner.
	_, err = d2.Register(ctx, driver.RegisterParams{App: "second", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "order.created"}}})
	var ce *driver.OwnerConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("after the crash another app registered the first app's type (err %v): the registration was lost", err)
	}
	el2, err := d2.Elector("first", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	epoch2, ok, err := el2.Acquire(ctx)
	if err != nil || !ok {
		t.Fatalf("Acquire after the crash: %d %v %v", epoch2, ok, err)
	}
	if epoch2 <= epoch {
		t.Fatalf("the leader after the crash won epoch %d, the one before it %d: an epoch given out twice", epoch2, epoch)
	}
	_ = el2.Release(ctx)
}

// A receiver's transaction survives a server crash once InTx returned, on
// a session whose synchronous_commit is off: the receiver acknowledges
// what InTx committed and the sender then settles its row for good, so an
// effect lost after its acknowledgement would be lost for good. (The
// chaos suite found this: a crash between the receiver's asynchronous
// commit and the relay's settle, made after the restart, lost the
// effect.) The same session's plain asynchronous commit, made after it,
// is lost: the crash is one that loses what was not flushed.
func TestInTxCommitsDurablyOnAnAsynchronousSession(t *testing.T) {
	const schema = "durable"
	srv, open := crashServer(t, schema)
	ctx := context.Background()
	pool, d := open()
	if _, err := pool.Exec(ctx, "CREATE TABLE durable.effects (v text PRIMARY KEY); CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	release, err := srv.HoldWAL(ctx)
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
	if err := srv.Crash(); err != nil {
		t.Fatal(err)
	}
	release()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pool2, _ := open()
	rows, err := pool2.Query(ctx, "SELECT v FROM durable.effects ORDER BY v")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var records int
	if err := pool2.QueryRow(ctx, "SELECT count(*) FROM durable.inbox WHERE consumer = 'c' AND key = 'k'").Scan(&records); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "applied in InTx" || records != 1 {
		t.Fatalf("after the crash: effects %q, %d dedup records; want only InTx's effect and its record kept", got, records)
	}
}
