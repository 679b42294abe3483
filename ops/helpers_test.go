package ops_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// outbox is a migrated schema of its own where two apps own types:
// pedidos owns pedido.criado and pedido.pago, faturamento owns
// fatura.emitida; nobody owns avulso.
type outbox struct {
	t     *testing.T
	drv   *postgres.Driver
	token int64
}

func newOutbox(t *testing.T) *outbox {
	t.Helper()
	drv, err := postgres.New(testdb.Pool(t), &postgres.Config{Schema: testdb.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "pedidos"}); err != nil {
		t.Fatal(err)
	}
	for app, types := range map[string][]string{"pedidos": {"pedido.criado", "pedido.pago"}, "faturamento": {"fatura.emitida"}} {
		res := make([]driver.Resource, len(types))
		for i, ty := range types {
			res[i] = driver.Resource{Kind: driver.ResourceType, Name: ty}
		}
		if _, err := drv.Register(ctx, driver.RegisterParams{App: app, Resources: res}); err != nil {
			t.Fatal(err)
		}
	}
	return &outbox{t: t, drv: drv}
}

// claim enqueues n rows of typ and claims them: the ids, in order.
func (o *outbox) claim(typ string, n int) []int64 {
	o.t.Helper()
	ctx := context.Background()
	rows := make([]driver.InsertRow, n)
	for i := range rows {
		var id [16]byte
		_, _ = rand.Read(id[:])
		rows[i] = driver.InsertRow{MessageID: id, Type: typ, Key: "k", Payload: []byte(`{"n":1}`)}
	}
	if err := o.drv.Insert(ctx, driver.InsertParams{Rows: rows}); err != nil {
		o.t.Fatal(err)
	}
	o.token++
	jobs, err := o.drv.Claim(ctx, driver.ClaimParams{Types: []string{typ}, Limit: n, Lease: time.Minute, Token: o.token})
	if err != nil || len(jobs) != n {
		o.t.Fatalf("claim %s: %d of %d, %v", typ, len(jobs), n, err)
	}
	ids := make([]int64, n)
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

func (o *outbox) settle(p driver.SettleParams) {
	o.t.Helper()
	p.Token = o.token
	res, err := o.drv.Settle(context.Background(), p)
	if err != nil || len(res.Settled) != len(p.IDs()) {
		o.t.Fatalf("settle: %+v, %v", res, err)
	}
}

// dead makes n dead letters of typ; marked ones first had an at-most-once
// attempt marked.
func (o *outbox) dead(typ string, n int, marked bool) []int64 {
	o.t.Helper()
	ids := o.claim(typ, n)
	if marked {
		if _, err := o.drv.Mark(context.Background(), driver.MarkParams{Token: o.token, IDs: ids}); err != nil {
			o.t.Fatal(err)
		}
	}
	p := driver.SettleParams{}
	for _, id := range ids {
		p.Dead = append(p.Dead, driver.Failure{ID: id, Error: "refused: 422", Route: "pedidos → http https://user:secret@billing/m2m"})
	}
	o.settle(p)
	return ids
}

// inDoubt makes n messages in doubt of typ.
func (o *outbox) inDoubt(typ string, n int) []int64 {
	o.t.Helper()
	ids := o.claim(typ, n)
	if _, err := o.drv.Mark(context.Background(), driver.MarkParams{Token: o.token, IDs: ids}); err != nil {
		o.t.Fatal(err)
	}
	p := driver.SettleParams{}
	for _, id := range ids {
		p.InDoubt = append(p.InDoubt, driver.Doubt{ID: id, Error: "timeout", ProbeAfter: time.Hour})
	}
	o.settle(p)
	return ids
}

func (o *outbox) state(id int64) driver.State {
	o.t.Helper()
	jobs, err := o.drv.ListMessages(context.Background(), driver.ListFilter{IDs: []int64{id}, Limit: 1})
	if err != nil {
		o.t.Fatal(err)
	}
	if len(jobs) == 0 {
		return ""
	}
	return jobs[0].State
}
