package clienttest_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/mensageriatest"
)

// recordingT captures failures instead of failing the real test, so the
// assertions themselves can be tested.
type recordingT struct {
	*testing.T
	mu   sync.Mutex
	msgs []string
}

func (r *recordingT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}
func (r *recordingT) Fatalf(format string, args ...any) { r.Errorf(format, args...) }
func (r *recordingT) Fatal(args ...any)                 { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recordingT) failed() bool                      { r.mu.Lock(); defer r.mu.Unlock(); return len(r.msgs) > 0 }

func open(t *testing.T) *sqlite.Driver {
	d, err := sqlite.Open(filepath.Join(t.TempDir(), "m.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DB().Exec("CREATE TABLE balance (account TEXT PRIMARY KEY, cents INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return d
}

func snapshot(d *sqlite.Driver) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		rows, err := d.DB().QueryContext(ctx, "SELECT account, cents FROM balance ORDER BY account")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		state := map[string]int{}
		for rows.Next() {
			var a string
			var c int
			if err := rows.Scan(&a, &c); err != nil {
				return nil, err
			}
			state[a] = c
		}
		return state, rows.Err()
	}
}

const credit = "INSERT INTO balance (account, cents) VALUES ('acc-1', 100) ON CONFLICT (account) DO UPDATE SET cents = cents + 100"

func delivery() *mensageria.Delivery {
	return &mensageria.Delivery{ID: uuid.Must(uuid.NewV7()), Type: "credit", Key: "credit-42", CreatedAt: time.Now(), Payload: []byte(`{}`)}
}

func TestAssertIdempotentPassesForAnInboxReceiver(t *testing.T) {
	d := open(t)
	in, err := mensageria.NewInbox(d, mensageria.InboxConfig{Consumer: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	rt := &recordingT{T: t}
	mensageriatest.AssertIdempotent(rt, mensageriatest.Idempotency{
		Message: delivery(),
		Apply: func(ctx context.Context, dl *mensageria.Delivery) error {
			_, err := in.Apply(ctx, dl, func(ctx context.Context, tx mensageria.Tx, _ *mensageria.Delivery) error {
				_, err := tx.Raw().(*sql.Tx).ExecContext(ctx, credit)
				return err
			})
			return err
		},
		Snapshot: snapshot(d),
		N:        8,
	})
	if rt.failed() {
		t.Fatalf("an inbox receiver was reported not idempotent: %v", rt.msgs)
	}
}

func TestAssertIdempotentCatchesADoubledEffect(t *testing.T) {
	d := open(t)
	rt := &recordingT{T: t}
	mensageriatest.AssertIdempotent(rt, mensageriatest.Idempotency{
		Message: delivery(),
		Apply: func(ctx context.Context, _ *mensageria.Delivery) error {
			_, err := d.DB().ExecContext(ctx, credit) // no dedup: every delivery credits again
			return err
		},
		Snapshot: snapshot(d),
	})
	if !rt.failed() || !strings.Contains(strings.Join(rt.msgs, "\n"), "not idempotent") {
		t.Fatalf("a doubled effect went unnoticed: %v", rt.msgs)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestAssertPartitionPassesForATypeScopedApp(t *testing.T) {
	d := open(t)
	reg := mensageria.NewRegistry().MustRegister("pedido.criado", mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))
	c, err := mensageria.New(d, &mensageria.Config{App: "pedidos", Registry: reg, PollInterval: 10 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	rt := &recordingT{T: t}
	mensageriatest.AssertPartition(rt, mensageriatest.Partition{Client: c})
	if rt.failed() {
		t.Fatalf("a correct app failed the partition check: %v", rt.msgs)
	}
}

// greedyDriver behaves like a relay with no type filter: it also takes the
// foreign rows, cannot route them and fails them, as the unfiltered relay
// of the decision record did.
type greedyDriver struct{ driver.Driver }

func (g greedyDriver) Claim(ctx context.Context, p driver.ClaimParams) ([]driver.Job, error) {
	p.Types = append(p.Types, "mensageriatest.foreign")
	jobs, err := g.Driver.Claim(ctx, p)
	var mine []driver.Job
	for _, j := range jobs {
		if j.Type == "mensageriatest.foreign" {
			_, _ = g.Driver.Settle(ctx, driver.SettleParams{Token: p.Token, Dead: []driver.Failure{{ID: j.ID, Error: "no sender registered for type"}}})
			continue
		}
		mine = append(mine, j)
	}
	return mine, err
}

func TestAssertPartitionCatchesAGreedyRelay(t *testing.T) {
	d := open(t)
	reg := mensageria.NewRegistry().MustRegister("pedido.criado", mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))
	c, err := mensageria.New(greedyDriver{d}, &mensageria.Config{App: "pedidos", Registry: reg, PollInterval: 10 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	rt := &recordingT{T: t}
	mensageriatest.AssertPartition(rt, mensageriatest.Partition{Client: c})
	if !rt.failed() {
		t.Fatal("a relay that claims a foreign type passed the partition check")
	}
}
