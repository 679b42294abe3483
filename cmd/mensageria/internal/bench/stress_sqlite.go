package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
)

// StressSQLite runs the stress scenario's phases that mean something on the
// embedded default (no horizon to pin, no REPEATABLE READ readers) on a
// fresh database file in dir each:
//
//   - the phases of cfg.Phases that do not crash, with the relay in the
//     producers' process: how an app embeds SQLite, its enqueues waking its
//     own relay; metrics prefixed "sqlite/";
//   - each crash phase, with the relay in a process of its own on the same
//     file, as `mensageria relay` serves one (no wake-up crosses processes,
//     so it polls every cfg.PollInterval, default 5ms), killed a quarter in
//     and started again; metrics prefixed "sqlite-crash/".
//
// The default phases are warmup 30s, clean 90s, crash 90s. Gauges are the
// database file's and its WAL's sizes.
func StressSQLite(ctx context.Context, dir string, cfg StressConfig) (Result, error) {
	r := Result{Scenario: "stress-sqlite"}
	if cfg.Phases == nil {
		cfg.Phases = SQLiteStressPhases(30*time.Second, 90*time.Second)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return r, err
	}
	if len(cfg.OutboxSettings) > 0 {
		return r, fmt.Errorf("%w: outbox settings are PostgreSQL storage parameters", ErrStressConfig)
	}
	var embedded, crashes []StressPhase
	for _, p := range cfg.Phases {
		switch {
		case p.Pin || p.Readers:
			return r, fmt.Errorf("%w: phase %q: SQLite has no xmin horizon to pin and no REPEATABLE READ readers", ErrStressConfig, p.Name)
		case p.Crash:
			crashes = append(crashes, p)
		default:
			embedded = append(embedded, p)
		}
	}
	run := func(name string, phases []StressPhase, child bool, prefix string) error {
		path := filepath.Join(dir, name+".db")
		c := cfg
		c.Phases = phases
		db, d, err := sqliteStressDB(ctx, path)
		if err != nil {
			return err
		}
		defer d.Close()
		s := &stressRun{cfg: c, db: db, book: newStressBook(len(phases))}
		spec := StressRelaySpec{Database: "sqlite:" + path, App: stressApp, Type: stressType,
			Lease: c.Lease, PollInterval: c.PollInterval, BatchSize: c.BatchSize, SendDelay: c.SendDelay}
		if child {
			if spec.PollInterval == 0 {
				spec.PollInterval = 5 * time.Millisecond
			}
			s.relay = &childRelay{spec: spec, command: c.RelayCommand, record: s.book.deliver}
		} else {
			s.relay = &inProcessRelay{drv: d, spec: spec, record: s.book.deliver}
		}
		got, err := s.run(ctx, prefix)
		for k, v := range got.Metrics {
			r.Set(k, v)
		}
		if got.Notes != "" {
			r.Notes = strings.TrimSpace(r.Notes + "\n" + got.Notes)
		}
		return err
	}
	if len(embedded) > 0 {
		if err := run("embedded", embedded, false, "sqlite/"); err != nil {
			return r, err
		}
	}
	for _, p := range crashes {
		if err := run("crash-"+p.Name, []StressPhase{p}, true, "sqlite-crash/"); err != nil {
			return r, err
		}
	}
	return r, nil
}

// SQLiteStressPhases are the phases of StandardStressPhases that
// StressSQLite runs unless told otherwise: warmup, clean and crash, each
// as long as there. SQLite has no horizon to pin and no REPEATABLE READ
// readers; the recoveries from them and the high load are left out with
// them.
func SQLiteStressPhases(warmup, phase time.Duration) []StressPhase {
	var out []StressPhase
	for _, p := range StandardStressPhases(warmup, phase, phase) {
		if p.Name == "warmup" || p.Name == "clean" || p.Crash {
			out = append(out, p)
		}
	}
	return out
}

// sqliteStressDB opens a fresh database file for the scenario, migrated,
// with the business tables and the stress type owned.
func sqliteStressDB(ctx context.Context, path string) (stressDB, *sqlite.Driver, error) {
	d, err := sqlite.Open(path, nil)
	if err != nil {
		return stressDB{}, nil, err
	}
	fail := func(err error) (stressDB, *sqlite.Driver, error) {
		_ = d.Close()
		return stressDB{}, nil, err
	}
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		return fail(err)
	}
	sdb := d.DB()
	for _, q := range []string{
		"CREATE TABLE stress_orders (seq INTEGER PRIMARY KEY, customer INTEGER NOT NULL, body TEXT NOT NULL)",
		"CREATE TABLE stress_customers (id INTEGER PRIMARY KEY, orders INTEGER NOT NULL DEFAULT 0)",
		"WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < 999) INSERT INTO stress_customers (id) SELECT n FROM g",
	} {
		if _, err := sdb.ExecContext(ctx, q); err != nil {
			return fail(err)
		}
	}
	producer, err := ownerClient(ctx, d, stressApp, stressType)
	if err != nil {
		return fail(err)
	}
	s := sqliteStress{db: sdb, path: path, outbox: d.Table("outbox"), producer: producer}
	db := stressDB{name: "SQLite", tx: s.tx, sample: s.sample, committed: s.committed, waiting: s.waiting}
	return db, d, nil
}

// sqliteStress is SQLite's side of the scenario, on the database file at
// path.
type sqliteStress struct {
	db       *sql.DB
	path     string
	outbox   string
	producer *mensageria.Client
}

func (s sqliteStress) tx(ctx context.Context, seq int64) error {
	tx, err := s.db.BeginTx(ctx, nil) // immediate: Open's DSN says so
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	customer := seq * 7919 % 1000
	if _, err := tx.ExecContext(ctx, "INSERT INTO stress_orders (seq, customer, body) VALUES (?, ?, ?)", seq, customer, Payload); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE stress_customers SET orders = orders + 1 WHERE id = ?", customer); err != nil {
		return err
	}
	if _, err := s.producer.EnqueueTx(ctx, tx, mensageria.Message{Type: stressType, Key: stressKey(seq), Payload: []byte(Payload)}); err != nil {
		return err
	}
	return tx.Commit()
}

// sample reads the database file's size, its free pages and its WAL's size.
func (s sqliteStress) sample(ctx context.Context) (dbSample, error) {
	var pages, size, free int64
	for q, p := range map[string]*int64{"PRAGMA page_count": &pages, "PRAGMA page_size": &size, "PRAGMA freelist_count": &free} {
		if err := s.db.QueryRowContext(ctx, q).Scan(p); err != nil {
			return dbSample{}, err
		}
	}
	wal := int64(0)
	if st, err := os.Stat(s.path + "-wal"); err == nil {
		wal = st.Size()
	}
	const mb = 1 << 20
	return dbSample{gauges: map[string]float64{
		"db-mb": float64(pages*size) / mb, "free-mb": float64(free*size) / mb, "wal-mb": float64(wal) / mb,
	}}, nil
}

func (s sqliteStress) committed(ctx context.Context, after int64, each func(int64)) error {
	return sqliteEach(ctx, s.db, "SELECT seq FROM stress_orders WHERE seq > ?", func(rows *sql.Rows) error {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return err
		}
		each(seq)
		return nil
	}, after)
}

func (s sqliteStress) waiting(ctx context.Context) ([]int64, error) {
	var seqs []int64
	err := sqliteEach(ctx, s.db, "SELECT key FROM "+s.outbox+" WHERE type = '"+stressType+"'", func(rows *sql.Rows) error {
		var k string
		if err := rows.Scan(&k); err != nil {
			return err
		}
		if seq, err := stressSeq(k); err == nil {
			seqs = append(seqs, seq)
		}
		return nil
	})
	return seqs, err
}

func sqliteEach(ctx context.Context, db *sql.DB, q string, each func(*sql.Rows) error, args ...any) error {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
