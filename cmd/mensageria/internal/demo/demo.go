// Package demo is what 'mensageria demo' runs: on embedded SQLite (or a
// PostgreSQL or MariaDB of the operator's), two apps exchange messages over
// loopback HTTP while relays are killed, receivers fail and answers are
// lost, and the Report counts what was sent, applied, redelivered and
// absorbed, judged by the shared verdict: nothing lost, nothing applied
// twice, a third app's rows untouched.
package demo

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

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
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

// Options are what a run is given; the command's flags set them.
type Options struct {
	// DB is a PostgreSQL (postgres://) or MariaDB/MySQL (mysql://,
	// mariadb://) URL; empty means embedded SQLite in a temporary
	// directory.
	DB string
	// Messages is how many orders to create (the command takes 50..200000).
	Messages int
	// Timeout ends the run, which then reports what it reached; it must
	// be positive.
	Timeout time.Duration
	// Keep keeps the database afterwards (SQLite file, PostgreSQL schema
	// or MySQL database).
	Keep bool
	// Seed seeds the fault injection; zero picks one at random.
	Seed uint64
	// Out receives the events of the run as they happen.
	Out io.Writer
	// TTY draws the progress line in place: Out is a terminal.
	TTY bool
}

// Run runs the demo: two apps exchange o.Messages orders and invoices
// under injected faults, and the events go to o.Out as they happen. The
// Report says what was sent, applied, redelivered, absorbed and lost; an
// error means the run itself could not go on (a database that does not
// answer), not that something was lost.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	d := &demo{opt: o, out: o.Out, tty: o.TTY}
	return d.run(ctx)
}

// demo is one run.
type demo struct {
	opt   Options
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
	newConn func() (*daemon.DB, error) // another connection set to the same database
	main    *daemon.DB
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
	if d.opt.DB == "" {
		dir, err := os.MkdirTemp("", "mensageria-demo-")
		if err != nil {
			return err
		}
		path := filepath.Join(dir, "demo.db")
		if d.opt.Keep {
			d.logf("database: SQLite %s (kept)", path)
		} else {
			d.closers = append(d.closers, func() { _ = os.RemoveAll(dir) })
			d.logf("database: embedded SQLite in %s", dir)
		}
		d.schema = "mensageria"
		d.effects, d.orders = "demo_effects", "demo_orders"
		d.newConn = func() (*daemon.DB, error) { return daemon.Open(ctx, "sqlite:"+path, d.schema, true) }
		d.label = "SQLite"
	} else if config.IsMySQL(d.opt.DB) {
		if err := d.setupMySQL(ctx); err != nil {
			return err
		}
	} else {
		if !strings.HasPrefix(d.opt.DB, "postgres://") && !strings.HasPrefix(d.opt.DB, "postgresql://") {
			return daemon.Usage("--db must be a postgres://, mysql:// or mariadb:// URL")
		}
		d.remote, d.label = true, "PostgreSQL"
		d.schema = fmt.Sprintf("mensageria_demo_%08x", rand.Uint32())
		d.effects, d.orders = d.schema+".demo_effects", d.schema+".demo_orders"
		admin, err := pgxpool.New(ctx, d.opt.DB)
		if err != nil {
			return daemon.Usage("--db: %v", err)
		}
		d.closers = append(d.closers, admin.Close)
		if err := admin.Ping(ctx); err != nil {
			return fmt.Errorf("--db: database unreachable: %w", err)
		}
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+d.schema); err != nil {
			return err
		}
		if d.opt.Keep {
			d.logf("database: PostgreSQL, schema %s (kept)", d.schema)
		} else {
			d.closers = append(d.closers, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, _ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+d.schema+" CASCADE")
			})
			d.logf("database: PostgreSQL, schema %s (dropped at the end)", d.schema)
		}
		d.newConn = func() (*daemon.DB, error) { return daemon.Open(ctx, d.opt.DB, d.schema, true) }
	}
	var err error
	if d.main, err = d.newConn(); err != nil {
		return err
	}
	d.closers = append(d.closers, d.main.Close)
	if _, err := d.main.Migrate(ctx, mensageria.MigrateUp, ""); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// The effects table has no unique key on purpose: a duplicate effect
	// must be visible, not turned into an error. VARCHAR, and no column
	// named key: MySQL indexes no TEXT whole and reserves the word. The
	// tables are the demo's, in its scratch database, so they are made
	// through its own handle, not in a transaction of the driver's.
	if err := d.exec(ctx, "CREATE TABLE "+d.effects+" (consumer VARCHAR(200) NOT NULL, order_key VARCHAR(200) NOT NULL, message_id VARCHAR(36) NOT NULL)"); err != nil {
		return err
	}
	return d.exec(ctx, "CREATE TABLE "+d.orders+" (order_key VARCHAR(200) PRIMARY KEY, amount_cents INTEGER NOT NULL)")
}

// exec runs one of the demo's own statements outside any transaction,
// with $n placeholders on every database.
func (d *demo) exec(ctx context.Context, q string) error {
	if d.main.Pool != nil {
		_, err := d.main.Pool.Exec(ctx, q)
		return err
	}
	_, err := d.main.SQL.ExecContext(ctx, dollarN.ReplaceAllString(q, "?"))
	return err
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
	if d.main.Pool != nil {
		rows, err := d.main.Pool.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		return scanRows(rows, scan)
	}
	rows, err := d.main.SQL.QueryContext(ctx, dollarN.ReplaceAllString(q, "?"), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return scanRows(rows, scan)
}

// scanRows hands each row of rows (pgx's or database/sql's) to scan.
func scanRows(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}, scan func(func(...any) error) error) error {
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
	stats, err := d.main.Driver.Stats(ctx)
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
