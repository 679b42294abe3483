package demo

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/verdict"
	"github.com/xadm/mensageria/ops"
)

// Report is the final count of a run: print it with Print; OK says
// whether every check passed.
type Report struct {
	elapsed time.Duration
	label   string // the database, as the table's heading names it
	cols    []string
	rows    map[string]map[string]int
	reasons map[string]int

	lost, dupEffects int
	rolledBackLeaked int
	foreignUntouched int
	foreignTotal     int
	noSenderOK       bool
	intruderOK       bool
	noSenderRows     int
	faults           [3]int64
}

func (r *Report) set(row, col string, v int) {
	if r.rows[row] == nil {
		r.rows[row] = map[string]int{}
	}
	r.rows[row][col] = v
}

// The inboxes' consumers, as the effects table names them.
const (
	consumerPedidos = "faturamento/pedidos" // faturamento applying orders
	consumerFaturas = "pedidos/faturas"     // pedidos applying invoices
)

// demoEnd is what the run left behind, as the report reads it.
type demoEnd struct {
	committed, rolledBack map[string]bool
	// applied counts the effects of each key, by consumer.
	applied map[string]map[string]int
	// dead holds the keys parked as dead, by type.
	dead map[string]map[string]bool
	// cancelled are the pedido.cancelado rows, the only messages the
	// demo sends whose receiver records no effect.
	cancelled []ops.Message
	// foreign are estoque's rows.
	foreign []ops.Message
}

// demoOwners says which app owns each type of the demo.
var demoOwners = map[string]string{typPedido: "pedidos", typCancelado: "pedidos", typFatura: "faturamento", typForeign: "estoque"}

// judge hands what the run left to the shared verdict: every committed
// order applied once or parked as dead, every invoice its effect enqueued
// likewise, every cancellation settled, and estoque's rows untouched.
// It returns the verdict and each message's type.
func (e *demoEnd) judge() (*verdict.Verdict, map[int64]string) {
	h := &verdict.History{Owner: demoOwners}
	types := map[int64]string{}
	add := func(typ, key string, effects int) {
		n := int64(len(h.Messages) + 1)
		types[n] = typ
		// A receiver may refuse any of them for good (a blocked
		// customer; no handler for a cancellation), or it may run out of
		// attempts: parked as dead with its reason, it is not lost.
		h.Messages = append(h.Messages, verdict.Message{N: n, Type: typ, Key: key, MayEndDead: true})
		for range effects {
			h.Effects = append(h.Effects, verdict.Effect{Seq: int64(len(h.Effects) + 1), N: n})
		}
		if e.dead[typ][key] {
			h.Dead = append(h.Dead, n)
		}
	}
	for _, k := range sortedKeys(e.committed) {
		add(typPedido, k, e.applied[consumerPedidos][k])
	}
	// Invoices are sent by faturamento's effect: one per applied order.
	for _, k := range sortedKeys(e.applied[consumerPedidos]) {
		add(typFatura, k, e.applied[consumerFaturas][k])
	}
	// faturamento has no effect for a cancellation: delivered is as
	// applied as the demo can see it.
	delivered := map[string]int{}
	for _, m := range e.cancelled {
		if m.State == ops.StateDelivered {
			delivered[m.Key]++
		}
	}
	for i := range demoCancelled {
		k := fmt.Sprintf("cancel-%d", i)
		add(typCancelado, k, delivered[k])
	}
	// estoque runs no relay here: a row of its type touched at all was
	// touched by one of the apps that do.
	for _, m := range e.foreign {
		if m.State == ops.StatePending && m.Attempts == 0 && m.LastError == "" {
			continue
		}
		n := int64(len(h.Messages) + len(h.Claims) + 1)
		h.Claims = append(h.Claims, verdict.Claim{N: n, Type: typForeign, Apps: []string{"pedidos", "faturamento"},
			Ref: fmt.Sprintf("its row %d was touched (%s, attempt %d) while only pedidos and faturamento ran relays", m.ID, m.State, m.Attempts)})
	}
	return verdict.Judge(h), types
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (d *demo) report(ctx context.Context, refused refusals) (*Report, error) {
	r := &Report{cols: []string{typPedido, typFatura, typCancelado}, rows: map[string]map[string]int{}, reasons: map[string]int{},
		foreignTotal: demoForeignRows, noSenderOK: refused.noSender, intruderOK: refused.intruder}
	// The run audits every app's rows, estoque's too: a DBA's scope.
	o := ops.New(d.main.Driver, ops.AllApps())
	counts, err := o.Count(ctx)
	if err != nil {
		return nil, err
	}
	total := map[string]int{}
	for _, c := range counts {
		total[c.Type] = int(c.Pending + c.Dead + c.DeliveredLastHour)
		r.set("delivered", c.Type, int(c.DeliveredLastHour))
		r.set("dead", c.Type, int(c.Dead))
	}
	end, err := d.readEnd(ctx, o, r)
	if err != nil {
		return nil, err
	}
	v, types := end.judge()
	r.count(v, types, end)
	if total[typFatura] != len(end.applied[consumerPedidos]) {
		// An invoice enqueued without its effect, or the reverse, would
		// break the one-transaction promise.
		r.dupEffects += abs(total[typFatura] - len(end.applied[consumerPedidos]))
	}
	r.set("sent", typFatura, total[typFatura])
	d.countFaults(r)
	noSender, err := messagesOf(ctx, o, typNoSender, 10)
	if err != nil {
		return nil, err
	}
	r.noSenderRows = len(noSender)
	return r, nil
}

// readEnd reads what the run left: the dead letters (their reasons go
// into r), the effects, the cancellations and estoque's rows.
func (d *demo) readEnd(ctx context.Context, o *ops.Ops, r *Report) (*demoEnd, error) {
	e := &demoEnd{dead: map[string]map[string]bool{}, applied: map[string]map[string]int{consumerPedidos: {}, consumerFaturas: {}}}
	for after := int64(0); ; {
		page, err := o.DeadLetters(ctx, ops.ListParams{After: after, Limit: 500})
		if err != nil {
			return nil, err
		}
		for _, m := range page.Messages {
			if e.dead[m.Type] == nil {
				e.dead[m.Type] = map[string]bool{}
			}
			e.dead[m.Type][m.Key] = true
			r.reasons[oneLine(m.Type+": "+deadReason(m.LastError), 70)]++
		}
		if !page.Truncated {
			break
		}
		after = page.NextAfter
	}
	err := d.query(ctx, "SELECT consumer, order_key, count(*) FROM "+d.effects+" GROUP BY consumer, order_key", nil, func(scan func(...any) error) error {
		var c, k string
		var n int
		if err := scan(&c, &k, &n); err != nil {
			return err
		}
		if e.applied[c] == nil {
			e.applied[c] = map[string]int{}
		}
		e.applied[c][k] = n
		return nil
	})
	if err != nil {
		return nil, err
	}
	if e.cancelled, err = messagesOf(ctx, o, typCancelado, 2*demoCancelled); err != nil {
		return nil, err
	}
	if e.foreign, err = messagesOf(ctx, o, typForeign, 1000); err != nil {
		return nil, err
	}
	d.mu.Lock()
	e.committed, e.rolledBack = d.committed, d.rolledBack
	d.mu.Unlock()
	return e, nil
}

// messagesOf lists up to limit messages of typ, whatever their state.
func messagesOf(ctx context.Context, o *ops.Ops, typ string, limit int) ([]ops.Message, error) {
	page, err := o.Messages(ctx, ops.ListParams{Types: []string{typ}, Limit: limit})
	if err != nil {
		return nil, err
	}
	return page.Messages, nil
}

// count fills the table from the verdict and what the run left.
func (r *Report) count(v *verdict.Verdict, types map[int64]string, e *demoEnd) {
	r.set("sent", typPedido, len(e.committed))
	r.set("sent", typCancelado, demoCancelled)
	r.set("applied once", typPedido, len(e.applied[consumerPedidos]))
	r.set("applied once", typFatura, len(e.applied[consumerFaturas]))
	for _, c := range r.cols {
		r.set("lost", c, 0)
	}
	for _, x := range v.Violations {
		switch x.Kind {
		case verdict.Lost:
			r.set("lost", types[x.N], r.rows["lost"][types[x.N]]+1)
			r.lost++
		case verdict.DuplicateEffect:
			extra := v.Applied[x.N] - 1
			r.set("duplicate effects", types[x.N], r.rows["duplicate effects"][types[x.N]]+extra)
			r.dupEffects += extra
		}
	}
	r.foreignUntouched = len(e.foreign) - v.Count(verdict.ForeignClaim)
	for k := range e.rolledBack {
		if e.applied[consumerPedidos][k] > 0 {
			r.rolledBackLeaked++
		}
	}
	r.set("rolled back (never sent)", typPedido, len(e.rolledBack))
}

func (d *demo) countFaults(r *Report) {
	for _, fs := range []*faultServer{d.fat, d.ped} {
		fs.mu.Lock()
		for t, v := range fs.redeliv {
			r.set("redeliveries", t, r.rows["redeliveries"][t]+v)
		}
		for t, v := range fs.dupes {
			r.set("duplicates absorbed", t, r.rows["duplicates absorbed"][t]+v)
		}
		fs.mu.Unlock()
		r.faults[0] += fs.fault5xx.Load()
		r.faults[1] += fs.faultSlow.Load()
		r.faults[2] += fs.faultAck.Load()
	}
}

var (
	requestRef = regexp.MustCompile(` \(request [^)]*\)`)
	statusText = regexp.MustCompile(`http (\d{3}) [A-Za-z ]+: `)
)

// deadReason groups dead letters by cause: request ids make every text
// unique, so they are left out.
func deadReason(s string) string {
	s = requestRef.ReplaceAllString(strings.TrimPrefix(s, "permanent: "), "")
	return statusText.ReplaceAllString(s, "$1 ")
}

// oneLine fits s on one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// OK reports whether nothing was lost or applied twice, estoque's rows
// were left alone and both refusals happened.
func (r *Report) OK() bool {
	return r.lost == 0 && r.dupEffects == 0 && r.rolledBackLeaked == 0 && r.foreignUntouched == r.foreignTotal && r.noSenderOK && r.noSenderRows == 0 && r.intruderOK
}

// Print prints the table, the dead letters' reasons, the checks and the
// verdict.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\nfinished in %.1fs on %s\n\n", r.elapsed.Seconds(), r.label)
	// Under 80 columns, so the table survives a narrow terminal.
	rows := []struct{ key, label string }{
		{"sent", "sent"}, {"rolled back (never sent)", "rolled back"}, {"delivered", "delivered"},
		{"redeliveries", "redeliveries"}, {"duplicates absorbed", "duplicates absorbed"}, {"applied once", "applied once"},
		{"dead", "dead"}, {"lost", "lost"}, {"duplicate effects", "duplicate effects"},
	}
	fmt.Fprintf(w, "  %-19s", "")
	for _, c := range r.cols {
		fmt.Fprintf(w, "%17s", c)
	}
	fmt.Fprintf(w, "%7s\n", "total")
	for _, row := range rows {
		fmt.Fprintf(w, "  %-19s", row.label)
		sum := 0
		for _, c := range r.cols {
			v := r.rows[row.key][c]
			sum += v
			fmt.Fprintf(w, "%17d", v)
		}
		mark := ""
		if (row.key == "lost" || row.key == "duplicate effects") && sum != 0 {
			mark = "  <- FAIL"
		}
		fmt.Fprintf(w, "%7d%s\n", sum, mark)
	}
	if len(r.reasons) > 0 {
		fmt.Fprintln(w, "\n  dead, with reasons:")
		keys := make([]string, 0, len(r.reasons))
		for k := range r.reasons {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %5d  %s\n", r.reasons[k], k)
		}
	}
	check := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAIL"
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  foreign rows untouched  %d/%d %s (%s: pending, never tried)\n", r.foreignUntouched, r.foreignTotal, check(r.foreignUntouched == r.foreignTotal), typForeign)
	fmt.Fprintf(w, "  enqueue, no sender      %s (typed error, %d rows written)\n", check(r.noSenderOK && r.noSenderRows == 0), r.noSenderRows)
	fmt.Fprintf(w, "  another app's type      %s (a relay routing it refused to start)\n", check(r.intruderOK))
	fmt.Fprintf(w, "  rolled back, applied    %d %s\n", r.rolledBackLeaked, check(r.rolledBackLeaked == 0))
	fmt.Fprintf(w, "  faults injected         %d x 503, %d past the timeout, %d lost acks,\n", r.faults[0], r.faults[1], r.faults[2])
	fmt.Fprintf(w, "                          2 relays killed mid-batch\n")
	fmt.Fprintln(w)
	if r.OK() {
		fmt.Fprintln(w, "PASS: every committed message was applied once or parked as dead with its")
		fmt.Fprintln(w, "      reason; the inboxes absorbed every redelivery; nothing else was touched.")
	} else {
		fmt.Fprintln(w, "FAIL: see the rows marked above.")
	}
}
