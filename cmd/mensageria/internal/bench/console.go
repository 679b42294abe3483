package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/cmd/mensageria/internal/console"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/ops"
)

// ConsoleConfig sizes the console scenario (issue #15): the web console's
// main page over a large backlog.
type ConsoleConfig struct {
	Pending int // pending rows, spread over Types; 0: 1,000,000
	Types   int // 0: 50
	Apps    int // apps owning the types in turn, each with an election; 0: 10
	Dead    int // dead rows, spread over the types; 0: 1,000
	Loads   int // page loads timed; 0: 50
	// Plans, when set, receives the EXPLAIN (ANALYZE, BUFFERS) of each
	// statement the page and the dead-letter list run, by name.
	Plans func(name, plan string)
}

func consoleType(i int) string { return fmt.Sprintf("console.type-%02d", i) }

// Console fills an outbox of its own, in a schema beside e's (the page
// counts every app of its schema, so rows an earlier scenario of the run
// left in e's would be counted too), with cfg.Pending pending rows over cfg.Types
// types (and cfg.Dead dead ones, an hour of per-minute delivered counts,
// a route state per type and a held election per app), then times the
// console's main page (GET /api/overview, the whole handler and its JSON)
// against the per-type count the page does not run (driver Stats, what a
// page counting on every load would cost), and the first page of a type's
// dead letters and one letter's detail.
//
// Metrics: page-p50-ms, page-p99-ms, page-max-ms (target ≤ 200),
// count-ms (Stats: the console's background recount, once per
// max(1s, 10×count-ms)), dead-page-ms, detail-ms.
func Console(ctx context.Context, e Env, cfg ConsoleConfig) (Result, error) {
	r := Result{Scenario: "console"}
	cfg.withDefaults()
	e, drop, err := e.sideSchema(ctx, e.Schema+"_console")
	if err != nil {
		return r, err
	}
	defer drop()
	d, err := e.driver()
	if err != nil {
		return r, err
	}
	types, release, err := consoleFill(ctx, e, d, cfg)
	defer release()
	if err != nil {
		return r, err
	}
	if err := e.settle(ctx); err != nil {
		return r, err
	}

	// The per-load count the console does not do, timed as the baseline.
	began := time.Now()
	if _, err := d.Stats(ctx); err != nil {
		return r, err
	}
	r.Set("count-ms", ms(time.Since(began)))

	c, err := console.New(console.Options{Ops: ops.New(d, ops.AllApps()), Auth: console.Auth{Token: consoleToken}, MinRefresh: time.Hour})
	if err != nil {
		return r, err
	}
	defer c.Close()
	get := func(path string) (time.Duration, []byte, error) { return consoleGet(ctx, c, path) }
	loads, err := consoleOverviewLoads(cfg, get)
	if err != nil {
		return r, err
	}
	r.Set("page-p50-ms", ms(loads[len(loads)/2]))
	r.Set("page-p99-ms", ms(loads[(len(loads)-1)*99/100]))
	r.Set("page-max-ms", ms(loads[len(loads)-1]))
	r.Set("pending", float64(cfg.Pending))
	r.Set("types", float64(cfg.Types))

	took, body, err := get("/api/dead?type=" + types[cfg.Types/2] + "&limit=50")
	if err != nil {
		return r, err
	}
	r.Set("dead-page-ms", ms(took))
	var page console.DeadPage
	if err := json.Unmarshal(body, &page); err != nil || len(page.Letters) == 0 {
		return r, fmt.Errorf("dead page: %v (%d letters)", err, len(page.Letters))
	}
	took, _, err = get(fmt.Sprintf("/api/messages/%d", page.Letters[0].ID))
	if err != nil {
		return r, err
	}
	r.Set("detail-ms", ms(took))
	r.Notes = fmt.Sprintf("%d pending over %d types, %d apps; page p50 %.1f ms (target ≤ 200 ms); a count per load would add %.0f ms",
		cfg.Pending, cfg.Types, cfg.Apps, r.Metrics["page-p50-ms"], r.Metrics["count-ms"])

	if cfg.Plans != nil {
		if err := consolePlans(ctx, e, d, types, page.Letters[0].ID, cfg.Plans); err != nil {
			return r, err
		}
	}
	return r, nil
}

// withDefaults fills the zero fields.
func (cfg *ConsoleConfig) withDefaults() {
	if cfg.Pending == 0 {
		cfg.Pending = 1_000_000
	}
	if cfg.Types == 0 {
		cfg.Types = 50
	}
	if cfg.Apps == 0 {
		cfg.Apps = 10
	}
	if cfg.Dead == 0 {
		cfg.Dead = 1000
	}
	if cfg.Loads == 0 {
		cfg.Loads = 50
	}
}

// consoleFill fills e's outbox as Console says, and holds an election per
// app until release is called (also after an error).
func consoleFill(ctx context.Context, e Env, d *postgres.Driver, cfg ConsoleConfig) (types []string, release func(), err error) {
	var held []driver.Elector
	release = func() {
		for _, el := range slices.Backward(held) {
			_ = el.Release(context.WithoutCancel(ctx))
		}
	}
	types = make([]string, cfg.Types)
	byApp := map[string][]string{}
	for i := range types {
		types[i] = consoleType(i)
		app := fmt.Sprintf("console-app-%02d", i%cfg.Apps)
		byApp[app] = append(byApp[app], types[i])
	}
	for app, ts := range byApp {
		if err := own(ctx, d, app, ts...); err != nil {
			return nil, release, err
		}
	}
	if err := consoleRows(ctx, e, cfg, types); err != nil {
		return nil, release, err
	}
	for app, ts := range byApp {
		var states []driver.RouteState
		for i, t := range ts {
			st := driver.RouteState{Type: t, App: app, Route: app + " → http https://billing.example/m2m", State: "flowing", Since: time.Now()}
			if i == 0 && app == "console-app-00" {
				st.State, st.Failures, st.Until, st.LastError = "paused", 5, time.Now().Add(time.Minute), "dial tcp: connection refused"
			}
			states = append(states, st)
		}
		if err := d.SetRouteStates(ctx, driver.RouteStatesParams{App: app, States: states, Replace: true}); err != nil {
			return nil, release, err
		}
		el, err := d.Elector(app, time.Minute)
		if err != nil {
			return nil, release, err
		}
		if _, _, err := el.Acquire(ctx); err != nil {
			return nil, release, err
		}
		held = append(held, el)
	}
	return types, release, nil
}

// consoleRows inserts the pending and dead rows and the delivered counts.
func consoleRows(ctx context.Context, e Env, cfg ConsoleConfig, types []string) error {
	o := e.Schema + ".outbox"
	fill := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO ` + o + ` (type, key, payload) SELECT ($1::text[])[1 + g % $2], 'k-' || g, $3::json FROM generate_series(1, $4) g`,
			[]any{types, cfg.Types, Payload, cfg.Pending}},
		{`INSERT INTO ` + o + ` (type, key, payload, state, attempts, last_error, last_route)
			SELECT ($1::text[])[1 + g % $2], 'dead-' || g, $3::json, 'dead', 5, 'destination answered 422: order ' || g || ' refused', 'app → http https://billing.example/m2m'
			FROM generate_series(1, $4) g`, []any{types, cfg.Types, Payload, cfg.Dead}},
		// A day of per-minute counts, as Purge keeps them: the chart reads
		// the last hour's.
		{`INSERT INTO ` + e.Schema + `.delivered_counts (type, minute, n)
			SELECT t, date_trunc('minute', now()) - m * interval '1 minute', 1 + (m * 7 + length(t)) % 40
			FROM unnest($1::text[]) t, generate_series(0, 1439) m`, []any{types}},
	}
	for _, f := range fill {
		if err := e.exec(ctx, f.sql, f.args...); err != nil {
			return fmt.Errorf("console fill: %w", err)
		}
	}
	return nil
}

const consoleToken = "bench-console-token-0123"

// consoleGet times one authenticated GET of path on c, and returns the
// body of a 200.
func consoleGet(ctx context.Context, c *console.Console, path string) (time.Duration, []byte, error) {
	req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
	req.Header.Set("Authorization", "Bearer "+consoleToken)
	w := httptest.NewRecorder()
	began := time.Now()
	c.ServeHTTP(w, req)
	took := time.Since(began)
	if w.Code != http.StatusOK {
		return took, nil, fmt.Errorf("GET %s: %d %s", path, w.Code, w.Body.String())
	}
	return took, w.Body.Bytes(), nil
}

// consoleOverviewLoads times cfg.Loads loads of the main page, sorted,
// and checks that the last one shows what the fill put in.
func consoleOverviewLoads(cfg ConsoleConfig, get func(path string) (time.Duration, []byte, error)) ([]time.Duration, error) {
	// The first load waits for the first count (the one New started);
	// every later one reads the kept counts.
	if _, _, err := get("/api/overview"); err != nil {
		return nil, err
	}
	var loads []time.Duration
	var last []byte
	for range cfg.Loads {
		took, body, err := get("/api/overview")
		if err != nil {
			return nil, err
		}
		loads = append(loads, took)
		last = body
	}
	var ov console.Overview
	if err := json.Unmarshal(last, &ov); err != nil {
		return nil, err
	}
	var pending int64
	for _, t := range ov.Types {
		pending += t.Pending
	}
	if len(ov.Types) != cfg.Types || pending != int64(cfg.Pending) || len(ov.Apps) != cfg.Apps {
		return nil, fmt.Errorf("console page shows %d types, %d pending, %d apps; want %d, %d, %d", len(ov.Types), pending, len(ov.Apps), cfg.Types, cfg.Pending, cfg.Apps)
	}
	slices.Sort(loads)
	return loads, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// consolePlans explains the statements behind the page, with the
// parameters the console sends: the driver's own text where it keeps it in
// a .sql file, the outbox part of ListMessages' built statement otherwise.
func consolePlans(ctx context.Context, e Env, d *postgres.Driver, types []string, deadID int64, out func(name, plan string)) error {
	stmt := func(name string) string {
		q, err := d.Statement(name)
		if err != nil {
			panic(err) // a statement the driver embeds; missing is a broken build
		}
		return q
	}
	s := e.Schema
	for _, q := range []struct {
		name, sql string
		args      []any
	}{
		{"delivered per minute (queries/delivered_minutes.sql)", stmt("delivered_minutes"), []any{types, time.Hour}},
		{"owners (queries/owners.sql)", stmt("owners"), []any{""}},
		{"route states (queries/route_state_list.sql)", stmt("route_state_list"), []any{""}},
		{"election holder (election.go)", `SELECT holder, epoch, since FROM ` + s + `.leader WHERE app = $1`, []any{"console-app-00"}},
		{"dead letters of a type (ops.go ListMessages)", `SELECT id, type, key FROM ` + s + `.outbox o WHERE state = $1 AND type = ANY($2::text[]) ORDER BY id LIMIT $3`,
			[]any{"dead", types[len(types)/2 : len(types)/2+1], 51}},
		{"one message (ops.go ListMessages)", `SELECT id, type, key FROM ` + s + `.outbox o WHERE id = ANY($1::bigint[]) ORDER BY id LIMIT $2`, []any{[]int64{deadID}, 1}},
		{"the background count (queries/stats.sql)", stmt("stats"), nil},
	} {
		rows, err := e.Pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+q.sql, q.args...)
		if err != nil {
			return fmt.Errorf("explain %s: %w", q.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("explain %s: %w", q.name, err)
		}
		out(q.name, strings.Join(lines, "\n"))
	}
	return nil
}
