package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver/postgres"
)

// The app and type of the stress scenario's messages.
const (
	stressApp  = "bench-stress"
	stressType = "bench.stress"
)

// stressSettings are the server settings a stress result names, so that a
// figure says what server it came from.
var stressSettings = []string{
	"server_version", "autovacuum", "autovacuum_naptime", "autovacuum_vacuum_threshold",
	"autovacuum_vacuum_scale_factor", "autovacuum_vacuum_insert_threshold", "autovacuum_vacuum_cost_delay",
	"autovacuum_vacuum_cost_limit", "shared_buffers", "fsync", "synchronous_commit", "max_wal_size",
}

// Stress runs the stress scenario against e's PostgreSQL: producers in
// this process, the relay in a child process (cfg.RelayCommand), every
// phase of cfg.Phases in one run. The figures only mean production when the
// server runs with production settings (autovacuum on): the result's notes
// name the server's settings, and say so when autovacuum is off.
// mensageriatest/pgserver starts such a server (mensageria bench --private-server).
func Stress(ctx context.Context, e Env, cfg StressConfig) (Result, error) {
	r := Result{Scenario: "stress"}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return r, err
	}
	if cfg.RelayCommand == nil {
		return r, fmt.Errorf("%w: on PostgreSQL the relay runs in a child process: RelayCommand is required", ErrStressConfig)
	}
	if _, err := e.driver(); err != nil { // migrates
		return r, err
	}
	if set, _ := outboxSettingsSQL(cfg.OutboxSettings); set != "" {
		if err := e.exec(ctx, "ALTER TABLE "+e.Schema+".outbox SET ("+set+")"); err != nil {
			return r, fmt.Errorf("%w: outbox settings: %v", ErrStressConfig, err)
		}
	}
	pcfg := e.Pool.Config()
	pcfg.MaxConns = int32(cfg.Producers + cfg.ReaderSessions + 4)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	pe := Env{Pool: pool, Schema: e.Schema}
	db, notes, err := pe.stressDB(ctx)
	if err != nil {
		return r, err
	}
	s := &stressRun{cfg: cfg, db: db, book: newStressBook(len(cfg.Phases))}
	s.relay = &childRelay{
		spec: StressRelaySpec{Database: pcfg.ConnString(), Schema: e.Schema, App: stressApp, Type: stressType,
			Lease: cfg.Lease, PollInterval: cfg.PollInterval, BatchSize: cfg.BatchSize, SendDelay: cfg.SendDelay},
		command: cfg.RelayCommand,
		record:  s.book.deliver,
	}
	r, err = s.run(ctx, "")
	r.Scenario = "stress"
	r.Notes = strings.TrimSpace(notes + "\n" + r.Notes)
	return r, err
}

// stressDB prepares e's schema for the scenario (the business tables, the
// type owned by the stress app) and returns its side of it, with notes on
// the server's settings.
func (e Env) stressDB(ctx context.Context) (stressDB, string, error) {
	d, err := postgres.New(e.Pool, &postgres.Config{Schema: e.Schema})
	if err != nil {
		return stressDB{}, "", err
	}
	if err := e.exec(ctx, fmt.Sprintf(`
		CREATE TABLE IF NOT EXISTS %[1]s.stress_orders (seq bigint PRIMARY KEY, customer int NOT NULL, body jsonb NOT NULL, at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE IF NOT EXISTS %[1]s.stress_customers (id int PRIMARY KEY, orders int NOT NULL DEFAULT 0);
		INSERT INTO %[1]s.stress_customers (id) SELECT g FROM generate_series(0, 999) g ON CONFLICT DO NOTHING;`, e.Schema)); err != nil {
		return stressDB{}, "", err
	}
	producer, err := ownerClient(ctx, d, stressApp, stressType)
	if err != nil {
		return stressDB{}, "", err
	}
	notes, err := e.serverNotes(ctx)
	if err != nil {
		return stressDB{}, "", err
	}
	db := stressDB{
		name:      "PostgreSQL",
		tx:        e.stressTx(producer),
		queuedTx:  e.stressQueuedTx(producer, d),
		sample:    e.stressSample,
		derive:    pgStressDerive,
		committed: e.stressCommitted,
		waiting:   e.stressWaiting,
		pin:       e.stressPin,
		reader:    e.stressReader,
	}
	return db, notes, nil
}

// stressTx is stressDB.tx: stressBusiness and the message through
// producer in the same transaction.
func (e Env) stressTx(producer *mensageria.Client) func(ctx context.Context, seq int64) error {
	return func(ctx context.Context, seq int64) error {
		return pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
			if err := tx.SendBatch(ctx, e.stressBusiness(seq)).Close(); err != nil {
				return err
			}
			_, err := producer.EnqueueTx(ctx, tx, mensageria.Message{Type: stressType, Key: stressKey(seq), Payload: []byte(Payload)})
			return err
		})
	}
}

// stressQueuedTx is stressDB.queuedTx: stressBusiness with the message
// queued into the same pgx.Batch (Client.PrepareEnqueue and
// postgres.Driver.QueueInsert), so that the enqueue adds no round trip.
func (e Env) stressQueuedTx(producer *mensageria.Client, d *postgres.Driver) func(ctx context.Context, seq int64) error {
	return func(ctx context.Context, seq int64) error {
		rows, _, err := producer.PrepareEnqueue(mensageria.Message{Type: stressType, Key: stressKey(seq), Payload: []byte(Payload)})
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
			b := e.stressBusiness(seq)
			d.QueueInsert(b, rows)
			return postgres.EnqueueError(tx.SendBatch(ctx, b).Close())
		})
	}
}

// stressBusiness is business transaction seq without its message: an
// order insert and its customer's update, in one round trip.
func (e Env) stressBusiness(seq int64) *pgx.Batch {
	customer := int(seq * 7919 % 1000)
	b := &pgx.Batch{}
	b.Queue("INSERT INTO "+e.Schema+".stress_orders (seq, customer, body) VALUES ($1, $2, $3)", seq, customer, Payload)
	b.Queue("UPDATE "+e.Schema+".stress_customers SET orders = orders + 1 WHERE id = $1", customer)
	return b
}

// stressSampleSQL reads the table's dead tuples and sizes, and the claim
// index's scans, the entries they returned and the index blocks they
// read: per scan, how far a claim walks (entries a pinned horizon keeps
// are returned to be checked against the heap; entries marked dead are
// skipped, but their blocks are still read).
const stressSampleSQL = `SELECT s.n_dead_tup, s.n_live_tup, s.autovacuum_count, s.vacuum_count, s.n_tup_upd, s.n_tup_hot_upd,
		pg_relation_size(s.relid), pg_indexes_size(s.relid),
		coalesce(pg_relation_size(i.indexrelid), 0), coalesce(i.idx_scan, 0), coalesce(i.idx_tup_read, 0),
		coalesce(b.idx_blks_hit + b.idx_blks_read, 0)
		FROM pg_stat_user_tables s
		LEFT JOIN pg_stat_user_indexes i ON i.relid = s.relid AND i.indexrelname = 'outbox_claim_idx'
		LEFT JOIN pg_statio_user_indexes b ON b.indexrelid = i.indexrelid
		WHERE s.schemaname = $1 AND s.relname = 'outbox'`

// stressSample is stressDB.sample.
func (e Env) stressSample(ctx context.Context) (dbSample, error) {
	var dead, live, av, vac, upd, hot, table, indexes, claimIdx, scans, read, blocks int64
	err := e.Pool.QueryRow(ctx, stressSampleSQL, e.Schema).Scan(&dead, &live, &av, &vac, &upd, &hot, &table, &indexes, &claimIdx, &scans, &read, &blocks)
	if err != nil {
		return dbSample{}, err
	}
	const mb = 1 << 20
	return dbSample{
		gauges: map[string]float64{"dead-tuples": float64(dead), "live-tuples": float64(live),
			"outbox-mb": float64(table) / mb, "indexes-mb": float64(indexes) / mb, "claim-idx-mb": float64(claimIdx) / mb},
		counters: map[string]float64{"autovacuums": float64(av), "vacuums": float64(vac), "updates": float64(upd),
			"hot-updates": float64(hot), "claim-scans": float64(scans), "claim-entries": float64(read),
			"claim-blocks": float64(blocks)},
	}, nil
}

// pgStressDerive is stressDB.derive.
func pgStressDerive(pre string, secs float64, g map[string]float64, r *Result) {
	r.Set(pre+"autovacuums", g["autovacuums"])
	if g["claim-scans"] > 0 {
		r.Set(pre+"claim-walk", g["claim-entries"]/g["claim-scans"])
		r.Set(pre+"claim-blocks", g["claim-blocks"]/g["claim-scans"])
		r.Set(pre+"claims/s", g["claim-scans"]/secs)
	}
	if g["updates"] > 0 {
		r.Set(pre+"hot-ratio", g["hot-updates"]/g["updates"])
	}
}

// stressCommitted is stressDB.committed.
func (e Env) stressCommitted(ctx context.Context, after int64, each func(int64)) error {
	rows, err := e.Pool.Query(ctx, "SELECT seq FROM "+e.Schema+".stress_orders WHERE seq > $1", after)
	if err != nil {
		return err
	}
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&seq}, func() error { each(seq); return nil })
	return err
}

// stressWaiting is stressDB.waiting.
func (e Env) stressWaiting(ctx context.Context) ([]int64, error) {
	rows, err := e.Pool.Query(ctx, "SELECT key FROM "+e.Schema+".outbox WHERE type = $1", stressType)
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var seqs []int64
	for _, k := range keys {
		if seq, err := stressSeq(k); err == nil {
			seqs = append(seqs, seq)
		}
	}
	return seqs, nil
}

// stressPin is stressDB.pin: a transaction holding an xid keeps the
// horizon until it rolls back.
func (e Env) stressPin(ctx context.Context) (func() error, error) {
	conn, err := e.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		conn.Release()
		return nil, err
	}
	var xid int64
	if err := conn.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		conn.Release()
		return nil, err
	}
	return func() error {
		defer conn.Release()
		_, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}, nil
}

// stressReader is stressDB.reader: an analytics scan of the outbox,
// again and again in one snapshot for txFor, then a new snapshot.
func (e Env) stressReader(ctx context.Context, txFor, pause time.Duration, scans *atomic.Int64) error {
	return e.tableReader(e.Schema+".outbox")(ctx, txFor, pause, scans)
}

// tableReader is stressDB.reader over table, whose rows have an id and a
// created_at (the outbox, River's river_job).
func (e Env) tableReader(table string) func(ctx context.Context, txFor, pause time.Duration, scans *atomic.Int64) error {
	return func(ctx context.Context, txFor, pause time.Duration, scans *atomic.Int64) error {
		return e.scanRepeatedly(ctx, "SELECT count(*), max(id), min(created_at) FROM "+table, txFor, pause, scans)
	}
}

func (e Env) scanRepeatedly(ctx context.Context, scan string, txFor, pause time.Duration, scans *atomic.Int64) error {
	for ctx.Err() == nil {
		err := pgx.BeginTxFunc(ctx, e.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			began := time.Now()
			for time.Since(began) < txFor && ctx.Err() == nil {
				if _, err := tx.Exec(ctx, scan); err != nil {
					return err
				}
				scans.Add(1)
				sleep(ctx, pause)
			}
			return nil
		})
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// serverNotes names the server's settings that shape the figures, and the
// outbox's own storage parameters.
func (e Env) serverNotes(ctx context.Context) (string, error) {
	rows, err := e.Pool.Query(ctx, "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY($1) ORDER BY name", stressSettings)
	if err != nil {
		return "", err
	}
	var parts []string
	autovacuum := ""
	var name, val string
	if _, err := pgx.ForEachRow(rows, []any{&name, &val}, func() error {
		parts = append(parts, name+"="+val)
		if name == "autovacuum" {
			autovacuum = val
		}
		return nil
	}); err != nil {
		return "", err
	}
	// None where the schema has no outbox (a peer's).
	var opts *[]string
	if err := e.Pool.QueryRow(ctx, "SELECT (SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = to_regclass($1))", e.Schema+".outbox").Scan(&opts); err != nil {
		return "", err
	}
	notes := "server: " + strings.Join(parts, " ")
	if opts != nil {
		notes += "; outbox: " + strings.Join(*opts, " ")
	}
	if autovacuum != "on" {
		notes = "NOT PRODUCTION SETTINGS: autovacuum is off on this server. " + notes
	}
	return notes, nil
}
