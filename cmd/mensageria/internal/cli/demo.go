package cli

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
)

// The demo's cast: two apps on one shared schema exchanging messages, and
// a third whose rows sit in the same table and must stay untouched.
const (
	typPedido    = "pedido.criado"    // pedidos -> faturamento
	typCancelado = "pedido.cancelado" // pedidos -> faturamento, which has no handler for it
	typFatura    = "fatura.emitida"   // faturamento -> pedidos, enqueued inside the inbox effect
	typForeign   = "estoque.reservado"
	typNoSender  = "nota.fiscal.emitida"
	demoToken    = "demo-token"
)

type demoOptions struct {
	db       string
	messages int
	timeout  time.Duration
	keep     bool
	seed     uint64
}

func (a *app) demoCommand() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch two apps exchange messages under injected faults, with nothing lost and nothing applied twice",
		Long: `demo needs no config and no set-up. On embedded SQLite in a temporary
directory, two apps exchange a few thousand messages over real HTTP on
loopback while faults are injected:

  - a relay is killed mid-batch (its database connections cut, its leases
    left behind) and a new one started; the leader of the other app is
    killed too and its standby takes over;
  - the receivers answer 5xx, time out, and lose acks (apply, then drop
    the response);
  - two relays of one app run overlapping cycles (election none);
  - rows of a third app's type sit in the shared table, and a fourth app
    whose config routes that type tries to start its relay;
  - an enqueue of a type with no sender is attempted.

It ends with a table (sent, delivered, redeliveries, duplicates absorbed,
dead with reasons, lost, duplicate effects, foreign rows untouched, the
refusals) and exits 1 if anything was lost or applied twice, or a refusal
did not happen.

--db postgres://... runs the same on PostgreSQL, in a schema of its own
that is dropped afterwards.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if o.messages < 50 || o.messages > 200000 {
				return usageErr("--messages must be 50..200000")
			}
			if o.seed == 0 {
				o.seed = rand.Uint64()
			}
			d := &demo{opt: o, out: a.io.Out, tty: isTerminal(a.io.Out)}
			ok, err := d.run(cmd.Context())
			if err != nil {
				return err
			}
			if !ok {
				return silentExit(ExitFailure)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.db, "db", "", "run on this PostgreSQL (postgres://...) or MariaDB/MySQL (mysql://...) instead of embedded SQLite")
	f.IntVar(&o.messages, "messages", 2000, "orders to create")
	f.DurationVar(&o.timeout, "timeout", 90*time.Second, "give up after this long")
	f.BoolVar(&o.keep, "keep", false, "keep the database afterwards (SQLite file, PostgreSQL schema or MySQL database)")
	f.Uint64Var(&o.seed, "seed", 0, "fault injection seed (default random)")
	_ = f.MarkHidden("seed")
	return cmd
}

// demo is one run.
type demo struct {
	opt   demoOptions
	out   io.Writer
	tty   bool
	start time.Time

	// remote is a database server (PostgreSQL, MariaDB/MySQL), where a
	// relay may have connections of its own; label names it in the report.
	remote  bool
	label   string
	schema  string
	effects string // qualified name of the effects table
	orders  string
	newConn func() (*backend, error) // another connection set to the same database
	main    *backend
	closers []func()

	rngMu sync.Mutex
	rng   *rand.Rand

	fat, ped *faultServer
	// inboxes are each app's receivers: registered with its relays, so
	// the catalog gives each consumer to its app with its window.
	inboxes map[string]*mensageria.Inbox

	// committed keys of pedido.criado; rolled back keys
	mu         sync.Mutex
	committed  map[string]bool
	rolledBack map[string]bool
	failed     map[string]error

	produced atomic.Int64
	events   []string
	evMu     sync.Mutex
}

func (d *demo) logf(format string, args ...any) {
	line := fmt.Sprintf("[%5.1fs] ", time.Since(d.start).Seconds()) + fmt.Sprintf(format, args...)
	d.evMu.Lock()
	defer d.evMu.Unlock()
	if d.tty {
		fmt.Fprint(d.out, "\r\x1b[K")
	}
	fmt.Fprintln(d.out, line)
}

func (d *demo) chance(p float64) bool {
	d.rngMu.Lock()
	defer d.rngMu.Unlock()
	return d.rng.Float64() < p
}

func (d *demo) cleanup() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// setup opens the database and creates the demo's own tables.
func (d *demo) setup(ctx context.Context) error {
	if d.opt.db == "" {
		dir, err := os.MkdirTemp("", "mensageria-demo-")
		if err != nil {
			return err
		}
		path := filepath.Join(dir, "demo.db")
		if d.opt.keep {
			d.logf("database: SQLite %s (kept)", path)
		} else {
			d.closers = append(d.closers, func() { _ = os.RemoveAll(dir) })
			d.logf("database: embedded SQLite in %s", dir)
		}
		d.schema = "mensageria"
		d.effects, d.orders = "demo_effects", "demo_orders"
		d.newConn = func() (*backend, error) { return openSQLite(path, d.schema) }
		d.label = "SQLite"
	} else if config.IsMySQL(d.opt.db) {
		if err := d.setupMySQL(); err != nil {
			return err
		}
	} else {
		if !strings.HasPrefix(d.opt.db, "postgres://") && !strings.HasPrefix(d.opt.db, "postgresql://") {
			return usageErr("--db must be a postgres://, mysql:// or mariadb:// URL")
		}
		d.remote, d.label = true, "PostgreSQL"
		d.schema = fmt.Sprintf("mensageria_demo_%08x", rand.Uint32())
		d.effects, d.orders = d.schema+".demo_effects", d.schema+".demo_orders"
		admin, err := pgxpool.New(ctx, d.opt.db)
		if err != nil {
			return usageErr("--db: %v", err)
		}
		d.closers = append(d.closers, admin.Close)
		if err := admin.Ping(ctx); err != nil {
			return fmt.Errorf("--db: database unreachable: %w", err)
		}
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+d.schema); err != nil {
			return err
		}
		if d.opt.keep {
			d.logf("database: PostgreSQL, schema %s (kept)", d.schema)
		} else {
			d.closers = append(d.closers, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, _ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+d.schema+" CASCADE")
			})
			d.logf("database: PostgreSQL, schema %s (dropped at the end)", d.schema)
		}
		d.newConn = func() (*backend, error) {
			pool, err := pgxpool.New(ctx, d.opt.db)
			if err != nil {
				return nil, err
			}
			drv, err := postgres.New(pool, &postgres.Config{Schema: d.schema})
			if err != nil {
				pool.Close()
				return nil, err
			}
			return &backend{drv: drv, pool: pool, close: func() { _ = drv.Close(); pool.Close() }}, nil
		}
	}
	var err error
	if d.main, err = d.newConn(); err != nil {
		return err
	}
	d.closers = append(d.closers, d.main.Close)
	if _, err := d.main.drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// The effects table has no unique key on purpose: a duplicate effect
	// must be visible, not turned into an error.
	return d.main.drv.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		// VARCHAR, and no column named key: MySQL indexes no TEXT whole
		// and reserves the word.
		if err := execRaw(ctx, tx.Raw(), "CREATE TABLE "+d.effects+" (consumer VARCHAR(200) NOT NULL, order_key VARCHAR(200) NOT NULL, message_id VARCHAR(36) NOT NULL)"); err != nil {
			return err
		}
		return execRaw(ctx, tx.Raw(), "CREATE TABLE "+d.orders+" (order_key VARCHAR(200) PRIMARY KEY, amount_cents INTEGER NOT NULL)")
	})
}

var dollarN = regexp.MustCompile(`\$\d+`)

// execRaw runs a statement in the backend's own transaction type.
func execRaw(ctx context.Context, tx any, q string, args ...any) error {
	switch t := tx.(type) {
	case pgx.Tx:
		_, err := t.Exec(ctx, q, args...)
		return err
	case *sql.Tx:
		_, err := t.ExecContext(ctx, dollarN.ReplaceAllString(q, "?"), args...)
		return err
	}
	return fmt.Errorf("demo: unexpected transaction type %T", tx)
}

// query reads outside any transaction: on SQLite a transaction would take
// the write lock (immediate mode) and queue behind the apps' writers.
func (d *demo) query(ctx context.Context, q string, args []any, scan func(func(...any) error) error) error {
	if d.main.pool != nil {
		rows, err := d.main.pool.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows.Scan); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	rows, err := d.main.sqlDB.QueryContext(ctx, dollarN.ReplaceAllString(q, "?"), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// progress is a snapshot while running.
type progress struct {
	pending, inflight, dead int64
	pedApplied, fatApplied  int
}

func (p progress) settled() bool { return p.pending == 0 && p.inflight == 0 }

func (p progress) line(d *demo, n int) string {
	return fmt.Sprintf("orders %d/%d  applied: orders %d, invoices %d  outbox: pending %d, in flight %d, dead %d  faults: 503 %d, slow %d, lost acks %d",
		d.produced.Load(), n, p.pedApplied, p.fatApplied, p.pending, p.inflight, p.dead,
		d.fat.fault5xx.Load()+d.ped.fault5xx.Load(), d.fat.faultSlow.Load()+d.ped.faultSlow.Load(), d.fat.faultAck.Load()+d.ped.faultAck.Load())
}

func (d *demo) progress(ctx context.Context) (progress, error) {
	var p progress
	stats, err := d.main.drv.Stats(ctx)
	if err != nil {
		return p, err
	}
	for _, s := range stats {
		if s.Type == typForeign {
			continue
		}
		p.pending += s.Pending
		p.inflight += s.InFlight
		p.dead += s.Dead
	}
	err = d.query(ctx, "SELECT consumer, count(DISTINCT order_key) FROM "+d.effects+" GROUP BY consumer", nil, func(scan func(...any) error) error {
		var c string
		var k int
		if err := scan(&c, &k); err != nil {
			return err
		}
		if strings.HasPrefix(c, "faturamento") {
			p.pedApplied = k
		} else {
			p.fatApplied = k
		}
		return nil
	})
	return p, err
}
