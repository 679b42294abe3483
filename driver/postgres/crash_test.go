//go:build unix

package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/pgserver"
	"github.com/xadm/mensageria/internal/testdb"
)

// The relay commits its claims and settles asynchronously (a lost one is a
// redelivery), but two of its writes must outlive a server crash whatever
// the connection string or the server says of synchronous_commit: an
// election's epoch, or the crash hands the same epoch to the next leader
// and both pass the claim's fence; and the app's registration, or after
// the crash its types have no owner and another app may take them while
// this app's relay goes on claiming their rows. The WAL writer is held, so
// that nothing but a synchronous commit writes them out before the crash.
func TestEpochAndRegistrationSurviveACrash(t *testing.T) {
	testdb.Long(t, "private PostgreSQL server")
	srv := testdb.PrivateServer(t, pgserver.Config{Settings: map[string]string{"autovacuum": "off"}})
	ctx := context.Background()
	const schema = "crash"
	setup, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	_ = setup.Close(ctx)
	// An operator's choice for speed: every session of this pool commits
	// asynchronously.
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
	// The migration, committed asynchronously too, is written out first.
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}

	release, err := srv.HoldWAL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := d.Register(ctx, driver.RegisterParams{App: "first", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "order.created"}}}); err != nil {
		t.Fatal(err)
	}
	el, err := d.Elector("first", time.Minute)
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
