package mensageriaotel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriaotel"
)

// traced is one test's tracing: an SDK provider recording every span in
// memory, synchronously, and the Tracer under test on it.
type traced struct {
	exp    *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	tracer *mensageriaotel.Tracer
	// app makes the business code's own spans.
	app trace.Tracer
}

func newTraced(t testing.TB) *traced {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &traced{exp: exp, tp: tp, tracer: mensageriaotel.New(mensageriaotel.Config{TracerProvider: tp}), app: tp.Tracer("orders-app")}
}

func (tr *traced) spans() tracetest.SpanStubs { return tr.exp.GetSpans() }

func (tr *traced) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tr.spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// shop is the sending app's database: a migrated schema with its orders
// table, and the receiving side's effects table with its inbox.
type shop struct {
	drv    *postgres.Driver
	pool   *pgxpool.Pool
	schema string
}

func newShop(t testing.TB) *shop {
	t.Helper()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{"CREATE TABLE " + schema + ".orders (id text PRIMARY KEY)", "CREATE TABLE " + schema + ".effects (key text NOT NULL)"} {
		if _, err := pool.Exec(context.Background(), ddl); err != nil {
			t.Fatal(err)
		}
	}
	return &shop{drv: drv, pool: pool, schema: schema}
}

func (s *shop) effects(t testing.TB) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+s.schema+".effects").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// applyEffect records the message in the effects table inside tx, in a
// span of the business code's own (so the trace shows the effect).
func (s *shop) applyEffect(tr *traced, ctx context.Context, tx pgx.Tx, key string) error {
	ctx, span := tr.app.Start(ctx, "bill order")
	defer span.End()
	_, err := tx.Exec(ctx, "INSERT INTO "+s.schema+".effects (key) VALUES ($1)", key)
	return err
}

// placeOrder is the business transaction: inside the span "place order",
// one order row and its message, committed together. It returns the span
// and the message id.
func placeOrder(t testing.TB, tr *traced, s *shop, c *mensageria.Client, typ, key string) (trace.SpanContext, string) {
	t.Helper()
	ctx, span := tr.app.Start(context.Background(), "place order")
	defer span.End()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.schema+".orders (id) VALUES ($1)", key); err != nil {
		t.Fatal(err)
	}
	ids, err := c.EnqueueTx(ctx, tx, mensageria.Message{Type: typ, Key: key, Payload: []byte(`{"total":42}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return span.SpanContext(), ids[0].String()
}

func startClient(t testing.TB, s *shop, tr *traced, reg *mensageria.Registry, hooks ...mensageria.Hook) *mensageria.Client {
	t.Helper()
	cfg := &mensageria.Config{
		App: fmt.Sprintf("orders-%08x", rand.Uint32()), Registry: reg,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond,
		RoutePause: 20 * time.Millisecond, RoutePauseMax: 100 * time.Millisecond,
		Logger: quietLogger(),
		Hooks:  append([]mensageria.Hook{tr.tracer}, hooks...),
	}
	c, err := mensageria.New(s.drv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func attr(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t testing.TB, s tracetest.SpanStub, k attribute.Key, want any) {
	t.Helper()
	v, ok := attr(s, k)
	if !ok {
		t.Errorf("span %q has no %s; attributes %v", s.Name, k, s.Attributes)
		return
	}
	if got := v.AsInterface(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("span %q: %s = %v, want %v", s.Name, k, got, want)
	}
}

// journey checks one message's trace, whatever carried it: the business
// span "place order" → "create <type>" → one "send <type>" per attempt,
// in the order they started, each linked to the creation context and
// ending with the outcome outcomes gives it → a "process <type>" under
// each attempt that reached the receiver (processed: their indexes in
// outcomes; the last one succeeds, those before it fail) → the effect's
// "bill order" under each process span.
func journey(t *testing.T, tr *traced, business trace.SpanContext, typ, id, key, transport string, outcomes []string, processed []int) {
	t.Helper()
	spans := tr.spans()
	for _, s := range spans {
		if s.SpanContext.TraceID() != business.TraceID() {
			t.Errorf("span %q is in trace %s, not the business transaction's %s", s.Name, s.SpanContext.TraceID(), business.TraceID())
		}
	}
	creates := tr.named("create " + typ)
	if len(creates) != 1 {
		t.Fatalf("%d create spans, want 1: %v", len(creates), names(spans))
	}
	create := creates[0]
	if create.Parent.SpanID() != business.SpanID() || create.SpanKind != trace.SpanKindProducer {
		t.Errorf("create span's parent %s kind %s, want the business span %s, producer", create.Parent.SpanID(), create.SpanKind, business.SpanID())
	}
	for k, v := range map[attribute.Key]any{
		"messaging.system": "mensageria", "messaging.operation.type": "create", "messaging.operation.name": "create",
		"messaging.destination.name": typ, "messaging.message.id": id, mensageriaotel.AttrKey: key,
	} {
		wantAttr(t, create, k, v)
	}

	sends := tr.named("send " + typ)
	if len(sends) != len(outcomes) {
		t.Fatalf("%d send spans, want one per attempt (%v): %v", len(sends), outcomes, names(spans))
	}
	sort.Slice(sends, func(i, j int) bool { return sends[i].StartTime.Before(sends[j].StartTime) })
	counted := 0
	for i, s := range sends {
		if s.Parent.SpanID() != create.SpanContext.SpanID() || s.SpanKind != trace.SpanKindClient {
			t.Errorf("send span %d: parent %s kind %s, want the create span, client", i, s.Parent.SpanID(), s.SpanKind)
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != create.SpanContext.SpanID() {
			t.Errorf("send span %d links %v, want one, to the create span", i, s.Links)
		}
		for k, v := range map[attribute.Key]any{
			"messaging.system": "mensageria", "messaging.operation.type": "send", "messaging.operation.name": "send",
			"messaging.destination.name": typ, "messaging.message.id": id, mensageriaotel.AttrKey: key,
			mensageriaotel.AttrOutcome: outcomes[i], mensageriaotel.AttrAttempt: counted + 1,
		} {
			wantAttr(t, s, k, v)
		}
		if r, ok := attr(s, mensageriaotel.AttrRoute); !ok || r.AsString() == "" {
			t.Errorf("send span %d has no route", i)
		}
		if outcomes[i] == "delivered" {
			if s.Status.Code != codes.Ok {
				t.Errorf("delivered attempt's status %v, want Ok", s.Status)
			}
		} else {
			wantAttr(t, s, "error.type", outcomes[i])
			if s.Status.Code != codes.Error {
				t.Errorf("failed attempt %d's status %v, want Error", i, s.Status)
			}
		}
		if outcomes[i] != "postponed" {
			counted++ // a postponed attempt is not counted: the next has its number
		}
	}

	procs := tr.named("process " + typ)
	if len(procs) != len(processed) {
		t.Fatalf("%d process spans, want %d (under attempts %v): %v", len(procs), len(processed), processed, names(spans))
	}
	sort.Slice(procs, func(i, j int) bool { return procs[i].StartTime.Before(procs[j].StartTime) })
	used := map[int]bool{}
	bills := tr.named("bill order")
	for i, n := range processed {
		send := sends[n]
		var proc *tracetest.SpanStub
		for j := range procs {
			if procs[j].Parent.SpanID() == send.SpanContext.SpanID() && !used[j] {
				proc, used[j] = &procs[j], true
				break
			}
		}
		if proc == nil {
			t.Fatalf("no process span under send span %d", n)
		}
		if proc.SpanKind != trace.SpanKindConsumer || len(proc.Links) != 1 || proc.Links[0].SpanContext.SpanID() != send.SpanContext.SpanID() {
			t.Errorf("process span of send %d: kind %s links %v, want consumer linked to its attempt", n, proc.SpanKind, proc.Links)
		}
		for k, v := range map[attribute.Key]any{
			"messaging.system": "mensageria", "messaging.operation.type": "process", "messaging.operation.name": "process",
			"messaging.destination.name": typ, "messaging.message.id": id, mensageriaotel.AttrKey: key,
		} {
			wantAttr(t, *proc, k, v)
		}
		if transport != "" {
			wantAttr(t, *proc, mensageriaotel.AttrTransport, transport)
		}
		last := i == len(processed)-1
		if last && proc.Status.Code == codes.Error {
			t.Errorf("the applied message's process span failed: %v", proc.Status)
		}
		if !last && proc.Status.Code != codes.Error {
			t.Errorf("process span of failed send %d: status %v, want Error", n, proc.Status)
		}
		found := false
		for _, b := range bills {
			found = found || b.Parent.SpanID() == proc.SpanContext.SpanID()
		}
		if !found {
			t.Errorf("no effect span under the process span of send %d", n)
		}
	}
}

func names(ss tracetest.SpanStubs) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}
