package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/mensageriaprom"
)

// --not-before schedules the message: an RFC 3339 time with its offset,
// anything else a usage error that writes nothing; status counts the
// message scheduled, apart from pending, until it is due.
func TestEnqueueNotBefore(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	p := writeConfig(t, db, "mensageria", "http://127.0.0.1:1/m2m")
	c := func(stdin string, args ...string) result {
		t.Helper()
		return run(t, stdin, tokEnv, append(args, "--config", p)...)
	}
	if r := c("", "migrate", "up"); r.code != 0 {
		t.Fatalf("migrate up: %+v", r)
	}
	if r := c("", "owners", "register"); r.code != 0 {
		t.Fatalf("owners register: %+v", r)
	}
	for _, bad := range []string{"tomorrow", "2026-12-24 18:00:00", "2026-12-24T18:00:00", "+10m", "10000-01-01T00:00:00Z"} {
		r := c("", "enqueue", "-t", "pedido.criado", "-k", "bad", "--not-before", bad)
		if r.code != ExitUsage || !strings.Contains(r.err, "--not-before") || !strings.Contains(r.err, "RFC 3339") {
			t.Fatalf("--not-before %q: %+v, want exit %d naming the flag and the format", bad, r, ExitUsage)
		}
	}
	if st := status(t, c).typ("pedido.criado"); st.Pending+st.Scheduled != 0 {
		t.Fatalf("refused enqueues wrote rows: %+v", st)
	}

	later := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	r := c("", "enqueue", "-t", "pedido.criado", "-k", "later", "--not-before", later.In(time.FixedZone("BRT", -3*3600)).Format(time.RFC3339), "--json")
	var out map[string]string
	if err := json.Unmarshal([]byte(r.out), &out); err != nil || r.code != 0 {
		t.Fatalf("enqueue --not-before: %v %+v", err, r)
	}
	if got := out["not_before"]; got != later.Format(time.RFC3339Nano) {
		t.Fatalf("--json not_before = %q, want %q (UTC)", got, later.Format(time.RFC3339Nano))
	}
	if r := c("", "enqueue", "-t", "pedido.criado", "-k", "past", "--not-before", "2001-02-03T04:05:06Z"); r.code != 0 || !strings.Contains(r.out, "not before 2001-02-03T04:05:06Z") {
		t.Fatalf("enqueue with a past --not-before: %+v", r)
	}
	if st := status(t, c).typ("pedido.criado"); st.Scheduled != 1 || st.Pending != 1 {
		t.Fatalf("status: %+v, want 1 scheduled (due in an hour) and 1 pending (due at once: its time had passed)", st)
	}
	r = c("", "status")
	if r.code != 0 || !strings.Contains(r.out, "SCHEDULED") {
		t.Fatalf("status: %+v, want a SCHEDULED column", r)
	}
	b, err := daemon.Open(context.Background(), db, "mensageria", true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(mensageriaprom.OutboxCollector("pedidos", b.Driver, nil, slog.New(slog.DiscardHandler)))
	var metrics strings.Builder
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() { // sorted by name
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Fprintf(&metrics, "%s{%s} %g\n", mf.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue())
		}
	}
	for _, want := range []string{
		`mensageria_outbox_scheduled{app="pedidos",owner="pedidos",type="pedido.criado"} 1`,
		`mensageria_outbox_pending{app="pedidos",owner="pedidos",type="pedido.criado"} 1`,
	} {
		if !strings.Contains(metrics.String(), want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, metrics.String())
		}
	}
}
