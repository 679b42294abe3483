package kafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// store is a migrated database with an "applied" table.
type store interface {
	driver() driver.Driver
	insert(ctx context.Context, tx mensageria.Tx, source string, part int32, off int64, value string) error
	counts(t testing.TB) map[string]int
}

func total(t testing.TB, s store) int {
	n := 0
	for _, c := range s.counts(t) {
		n += c
	}
	return n
}

// sqliteStore is the embedded backend with the same table.
type sqliteStore struct{ drv *sqlite.Driver }

func newSQLiteStore(t testing.TB) *sqliteStore {
	t.Helper()
	drv, err := sqlite.Open(filepath.Join(t.TempDir(), "sink.db"), &sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drv.Close() })
	ctx := testCtx(t)
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	err = drv.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		_, err := tx.Raw().(*sql.Tx).ExecContext(ctx, "CREATE TABLE applied (source text, part int, off int, value text)")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return &sqliteStore{drv: drv}
}

func (s *sqliteStore) driver() driver.Driver { return s.drv }

func (s *sqliteStore) insert(ctx context.Context, tx mensageria.Tx, source string, part int32, off int64, value string) error {
	_, err := tx.Raw().(*sql.Tx).ExecContext(ctx, "INSERT INTO applied VALUES (?, ?, ?, ?)", source, part, off, value)
	return err
}

func (s *sqliteStore) counts(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	err := s.drv.InTx(testCtx(t), func(ctx context.Context, tx driver.Tx) error {
		rows, err := tx.Raw().(*sql.Tx).QueryContext(ctx, "SELECT value, count(*) FROM applied GROUP BY value")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var v string
			var n int
			if err := rows.Scan(&v, &n); err != nil {
				return err
			}
			out[v] = n
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pgStore is a migrated PostgreSQL schema with an "applied" table that
// records every effect, without a unique key, so a duplicate shows.
type pgStore struct {
	drv    *postgres.Driver
	schema string
}

func newPGStore(t testing.TB) *pgStore {
	t.Helper()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".applied (source text, part int, off bigint, value text)"); err != nil {
		t.Fatal(err)
	}
	return &pgStore{drv: drv, schema: schema}
}

func (s *pgStore) driver() driver.Driver { return s.drv }

func (s *pgStore) insert(ctx context.Context, tx mensageria.Tx, source string, part int32, off int64, value string) error {
	_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO "+s.schema+".applied VALUES ($1, $2, $3, $4)", source, part, off, value)
	return err
}

// counts returns how many times each value was applied.
func (s *pgStore) counts(t testing.TB) map[string]int {
	t.Helper()
	rows, err := testdb.Pool(t).Query(testCtx(t), "SELECT value, count(*) FROM "+s.schema+".applied GROUP BY value")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var v string
		var n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		out[v] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// produceAborted writes n records in a transaction that is aborted.
func produceAborted(t testing.TB, addrs []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("aborter"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testCtx(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "aborted%d", i)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}

// The sink is killed in the middle of a batch (its transaction rolls back,
// nothing is committed anywhere) and a new member of the group takes over:
// every record's effect is applied exactly once, and the records of an
// aborted transaction never.
func TestSinkKilledMidBatchAppliesEachEffectOnce(t *testing.T) {
	t.Run("postgres", func(t *testing.T) { sinkKilledMidBatch(t, newPGStore(t)) })
	t.Run("sqlite", func(t *testing.T) { sinkKilledMidBatch(t, newSQLiteStore(t)) })
}

func sinkKilledMidBatch(t *testing.T, store store) {
	c := newCluster(t, "events")
	const n = 400
	produceInput(t, c.ListenAddrs(), "events", n/2)
	produceAborted(t, c.ListenAddrs(), "events", 50)
	produceInput2 := func() {
		cl, _ := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		defer cl.Close()
		for i := n / 2; i < n; i++ {
			if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: "events", Key: fmt.Appendf(nil, "k%d", i%5), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
				t.Error(err)
			}
		}
	}
	produceInput2()

	var calls atomic.Int64
	ctx1, kill := context.WithCancel(context.Background())
	defer kill()
	effect := func(ctx context.Context, tx mensageria.Tx, r *kgo.Record) error {
		if calls.Add(1) == 150 {
			kill() // dies here: the open transaction rolls back
			return ctx.Err()
		}
		return store.insert(ctx, tx, r.Topic, r.Partition, r.Offset, string(r.Value))
	}
	cfg := SinkConfig{
		Brokers: c.ListenAddrs(), Group: "projector", Topics: []string{"events"},
		Driver: store.driver(), Effect: effect, MaxPollRecords: 60,
		Opts: []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
	}
	s1, err := NewSink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Run(ctx1); err != nil {
		t.Fatalf("first sink: %v", err)
	}
	applied1 := total(t, store)
	if applied1 == 0 || applied1 >= n {
		t.Fatalf("first sink applied %d effects; the kill should land mid-way", applied1)
	}

	s2, err := NewSink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s2.Run(ctx2) }()
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return total(t, store) >= n }, "every effect applied")
	time.Sleep(200 * time.Millisecond) // a duplicate would land now
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := store.counts(t)
	for i := range n {
		if k := fmt.Sprintf("v%d", i); got[k] != 1 {
			t.Errorf("%s applied %d times", k, got[k])
		}
	}
	for k := range got {
		if len(k) > 7 && k[:7] == "aborted" {
			t.Errorf("record %s of an aborted transaction was applied", k)
		}
	}
	t.Logf("first sink applied %d before the kill; second applied %d, skipped %d", applied1, s2.Applied(), s2.Skipped())
}

// Records at or below the stored offset are skipped inside the
// transaction, whatever offset Kafka hands out (a rebalance, a reset).
func TestSinkSkipsStoredOffsets(t *testing.T) {
	store := newPGStore(t)
	var applied atomic.Int64
	s, err := NewSink(SinkConfig{
		Brokers: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, Driver: store.drv,
		Effect: func(ctx context.Context, tx mensageria.Tx, r *kgo.Record) error {
			applied.Add(1)
			return store.insert(ctx, tx, r.Topic, r.Partition, r.Offset, string(r.Value))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.cl.Close()
	recs := func(from, to int64) []*kgo.Record {
		var out []*kgo.Record
		for o := from; o <= to; o++ {
			out = append(out, &kgo.Record{Topic: "t", Partition: 2, Offset: o, Value: fmt.Appendf(nil, "v%d", o)})
		}
		return out
	}
	ctx := testCtx(t)
	if err := s.applyPartition(ctx, "t", 2, recs(0, 9)); err != nil {
		t.Fatal(err)
	}
	if err := s.applyPartition(ctx, "t", 2, recs(5, 14)); err != nil {
		t.Fatal(err)
	}
	if applied.Load() != 15 || s.Skipped() != 5 {
		t.Fatalf("applied %d skipped %d, want 15 and 5", applied.Load(), s.Skipped())
	}
	// The stored offsets are where a new assignment starts.
	offs, err := s.storedOffsets(ctx, map[string]map[int32]kgo.Offset{"t": {2: kgo.NewOffset().AtStart(), 0: kgo.NewOffset().AtStart()}})
	if err != nil {
		t.Fatal(err)
	}
	if got := offs["t"][2].EpochOffset().Offset; got != 15 {
		t.Fatalf("partition 2 resumes at %d, want 15", got)
	}
	if got := offs["t"][0].EpochOffset().Offset; got != -2 {
		t.Fatalf("partition 0 (nothing stored) resumes at %d, want the reset offset", got)
	}
}

// A record whose effect fails for good is skipped on its own; the records
// around it are applied, and a transient failure is retried.
func TestSinkPoisonAndTransientEffects(t *testing.T) {
	store := newPGStore(t)
	var transient atomic.Bool
	s, err := NewSink(SinkConfig{
		Brokers: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, Driver: store.drv,
		RetryBackoff: time.Millisecond,
		Effect: func(ctx context.Context, tx mensageria.Tx, r *kgo.Record) error {
			switch {
			case r.Offset == 3:
				return mensageria.Permanent(errors.New("unparseable"))
			case r.Offset == 6 && transient.CompareAndSwap(false, true):
				return errors.New("deadlock detected")
			}
			return store.insert(ctx, tx, r.Topic, r.Partition, r.Offset, string(r.Value))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.cl.Close()
	var recs []*kgo.Record
	for o := int64(0); o < 10; o++ {
		recs = append(recs, &kgo.Record{Topic: "t", Offset: o, Value: fmt.Appendf(nil, "v%d", o)})
	}
	if err := s.applyPartition(testCtx(t), "t", 0, recs); err != nil {
		t.Fatal(err)
	}
	got := store.counts(t)
	if len(got) != 9 || got["v3"] != 0 || s.Poisoned() != 1 {
		t.Fatalf("applied %v, poisoned %d; want all but v3 once", got, s.Poisoned())
	}
}
