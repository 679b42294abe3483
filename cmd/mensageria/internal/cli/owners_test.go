package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
)

// A shared schema as the ownership tests see it: its database, and the
// config files of the apps that share it.
type shared struct {
	t        *testing.T
	db       string
	schema   string
	receiver string
}

// eachBackend runs f on embedded SQLite and on PostgreSQL.
func eachBackend(t *testing.T, f func(t *testing.T, s *shared)) {
	t.Run("sqlite", func(t *testing.T) {
		f(t, &shared{t: t, db: "sqlite:" + filepath.Join(t.TempDir(), "m.db"), schema: "mensageria", receiver: "http://127.0.0.1:1/m2m"})
	})
	t.Run("postgres", func(t *testing.T) {
		testdb.Pool(t)
		f(t, &shared{t: t, db: testdb.URL(), schema: testdb.Schema(t), receiver: "http://127.0.0.1:1/m2m"})
	})
}

// app writes the config of one app routing types, and returns a runner of
// commands under it.
func (s *shared) app(name string, types ...string) func(stdin string, args ...string) result {
	s.t.Helper()
	var routes strings.Builder
	for _, typ := range types {
		fmt.Fprintf(&routes, "  - type: %s\n    http: {url: %s, token: ${TEST_TOKEN}, timeout: 1500ms}\n", typ, s.receiver)
	}
	p := writeFile(s.t, fmt.Sprintf("database: %s\nschema: %s\napp: %s\nroutes:\n%s"+
		"relay: {batch: 50, lease: 2s, max_attempts: 3, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 50ms}\n",
		s.db, s.schema, name, routes.String()))
	return func(stdin string, args ...string) result {
		s.t.Helper()
		return run(s.t, stdin, tokEnv, append(args, "--config", p)...)
	}
}

// open is a driver on the shared schema, for what the commands do not show.
func (s *shared) open() driver.Driver {
	s.t.Helper()
	b, err := daemon.Open(context.Background(), s.db, s.schema, true)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(b.Close)
	return b.Driver
}

func (s *shared) rows(drv driver.Driver, typ string) []driver.Job {
	s.t.Helper()
	jobs, err := drv.ListMessages(context.Background(), driver.ListFilter{Types: []string{typ}, Limit: 1000})
	if err != nil {
		s.t.Fatal(err)
	}
	return jobs
}

func catalogOf(t *testing.T, c func(string, ...string) result) []OwnerEntry {
	t.Helper()
	r := c("", "owners", "list", "--all-apps", "--json")
	var out []OwnerEntry
	if err := json.Unmarshal([]byte(r.out), &out); err != nil || r.code != 0 {
		t.Fatalf("owners list --all-apps --json: %v %+v", err, r)
	}
	return out
}

func ownerOf(entries []OwnerEntry, kind, name string) (string, bool) {
	for _, e := range entries {
		if e.Kind == kind && e.Name == name {
			return e.App, true
		}
	}
	return "", false
}

func must(t *testing.T, what string, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.out, r.err)
	}
	for _, w := range want {
		if !strings.Contains(r.out+r.err, w) {
			t.Fatalf("%s: output lacks %q\nstdout: %s\nstderr: %s", what, w, r.out, r.err)
		}
	}
}

// The first app to migrate a schema up owns its migrations: migrate up and
// relay --migrate from another app are refused naming the owner, and
// migrate check stays open to every app.
func TestMigrateOwner(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		pedidos := s.app("pedidos", "pedido.criado")
		faturamento := s.app("faturamento", "fatura.emitida")
		r := pedidos("", "migrate", "up", "--json")
		must(t, "migrate up by the first app", r, 0, `"owner":"pedidos"`)
		var up struct{ To, Latest int }
		if err := json.Unmarshal([]byte(r.out), &up); err != nil || up.Latest == 0 || up.To != up.Latest {
			t.Fatalf("migrate up --json: to %d, latest %d (%v); want the schema at this build's newest version", up.To, up.Latest, err)
		}
		must(t, "migrate up again by the owner", pedidos("", "migrate", "up"), 0, "nothing to apply", "owned by app pedidos")
		must(t, "migrate up by another app", faturamento("", "migrate", "up"), ExitUsage,
			`app "faturamento" cannot migrate the schema up`, `the schema's migrations are owned by app "pedidos"`, "migrate check")
		must(t, "relay --migrate by another app", faturamento("", "relay", "--migrate", "--listen", ""), ExitUsage,
			`app "faturamento"`, `app "pedidos"`)
		must(t, "migrate check by another app", faturamento("", "migrate", "check"), 0, "current")
		if owner, _ := ownerOf(catalogOf(t, pedidos), "migrations", "schema"); owner != "pedidos" {
			t.Fatalf("migrations owner %q", owner)
		}
	})
}

// owners register, list, transfer and release: what each records, and the
// refusals (another app's type, a wrong --from, a missing entry, misuse),
// each exit 2 with nothing changed.
func TestOwnersCommands(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		pedidos := s.app("pedidos", "pedido.criado", "pedido.ordenado")
		relatorios := s.app("relatorios", "pedido.criado")
		must(t, "migrate up", pedidos("", "migrate", "up"), 0)
		r := pedidos("", "owners", "list")
		must(t, "list before registering", r, 0, "routed by the config but not app pedidos's: pedido.criado, pedido.ordenado")
		if !hasRow(r.out, "migrations", "schema", "pedidos", "-") {
			t.Fatalf("owners list:\n%s", r.out)
		}
		must(t, "register", pedidos("", "owners", "register"), 0, "app pedidos owns 2 message type(s)", "pedido.criado, pedido.ordenado")
		must(t, "register again", pedidos("", "owners", "register"), 0)
		r = pedidos("", "owners", "list")
		must(t, "list", r, 0, "KIND", "pedido.ordenado")
		if !hasRow(r.out, "type", "pedido.criado", "pedidos", "-") || !hasRow(r.out, "type", "pedido.ordenado", "pedidos", "-") {
			t.Fatalf("owners list:\n%s", r.out)
		}
		before := catalogOf(t, pedidos)

		// Another app claiming a type of pedidos: refused, nothing recorded.
		must(t, "register another app's type", relatorios("", "owners", "register"), ExitUsage,
			`app "relatorios" cannot register its types`, `message type "pedido.criado" is owned by app "pedidos"`, "owners transfer type pedido.criado --from pedidos --to relatorios")
		if after := catalogOf(t, pedidos); !slices.Equal(entryKeys(after), entryKeys(before)) {
			t.Fatalf("the refused registration changed the catalog: %v -> %v", before, after)
		}
		must(t, "list of an app that owns nothing", relatorios("", "owners", "list"), 0, "app relatorios owns nothing")

		// Misuse: exit 2, nothing changed.
		for _, bad := range [][]string{
			{"owners", "transfer", "tipo", "pedido.criado", "--from", "pedidos", "--to", "relatorios"},
			{"owners", "transfer", "type", "pedido.criado", "--to", "relatorios"},
			{"owners", "transfer", "type", "pedido.criado", "--from", "pedidos"},
			{"owners", "transfer", "type", "pedido.criado", "--from", "pedidos", "--to", "pedidos"},
			{"owners", "transfer", "type", "--from", "pedidos", "--to", "relatorios"},
			{"owners", "transfer", "migrations", "other", "--from", "pedidos", "--to", "relatorios"},
			{"owners", "release", "type", "pedido.criado"},
			{"owners"},
		} {
			if r := pedidos("", bad...); r.code != ExitUsage || r.err == "" {
				t.Errorf("%v: exit %d %q, want a usage error", bad, r.code, r.err)
			}
		}
		must(t, "transfer with a wrong --from", pedidos("", "owners", "transfer", "type", "pedido.criado", "--from", "faturamento", "--to", "relatorios"), ExitUsage,
			`message type "pedido.criado" is owned by app "pedidos", not app "faturamento"; nothing changed`)
		must(t, "transfer of a missing entry", pedidos("", "owners", "transfer", "type", "nota.fiscal", "--from", "pedidos", "--to", "relatorios"), ExitUsage,
			`message type "nota.fiscal" is not in the ownership catalog`)
		must(t, "release with a wrong --from", pedidos("", "owners", "release", "type", "pedido.criado", "--from", "relatorios"), ExitUsage,
			`owned by app "pedidos", not app "relatorios"`)
		if after := catalogOf(t, pedidos); !slices.Equal(entryKeys(after), entryKeys(before)) {
			t.Fatalf("a refused transfer changed the catalog: %v -> %v", before, after)
		}

		// The operator's step: the type moves, and the new owner's
		// registration now passes while the old owner's is refused.
		must(t, "transfer", pedidos("", "owners", "transfer", "type", "pedido.criado", "--from", "pedidos", "--to", "relatorios"), 0,
			`message type "pedido.criado" moved from app "pedidos" to app "relatorios"`)
		must(t, "register by the new owner", relatorios("", "owners", "register"), 0)
		must(t, "register by the old owner", pedidos("", "owners", "register"), ExitUsage, `owned by app "relatorios"`)
		r = relatorios("", "owners", "list", "--json")
		var mine []OwnerEntry
		if err := json.Unmarshal([]byte(r.out), &mine); err != nil || len(mine) != 1 || mine[0].Name != "pedido.criado" || mine[0].App != "relatorios" || mine[0].Since.IsZero() {
			t.Fatalf("owners list --json of the new owner: %v %+v", err, r)
		}
		must(t, "release", relatorios("", "owners", "release", "type", "pedido.criado", "--from", "relatorios"), 0, "released by app \"relatorios\"")
		if _, ok := ownerOf(catalogOf(t, pedidos), "type", "pedido.criado"); ok {
			t.Fatal("the released type is still in the catalog")
		}
		must(t, "register after the release", pedidos("", "owners", "register"), 0)

		// The migrations move the same way.
		must(t, "transfer of the migrations", pedidos("", "owners", "transfer", "migrations", "schema", "--from", "pedidos", "--to", "relatorios"), 0)
		must(t, "migrate up by the new owner", relatorios("", "migrate", "up"), 0)
		must(t, "migrate up by the old owner", pedidos("", "migrate", "up"), ExitUsage, `app "relatorios"`)
	})
}

// hasRow reports whether a line of the table out starts with fields.
func hasRow(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(fields) && slices.Equal(f[:len(fields)], fields) {
			return true
		}
	}
	return false
}

func entryKeys(es []OwnerEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Kind + "/" + e.Name + "=" + e.App
	}
	slices.Sort(out)
	return out
}

// enqueue checks the catalog and never records anything: a type no app
// owns and another app's type are refused with exit 2 and no row written.
func TestEnqueueObeysCatalog(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		pedidos := s.app("pedidos", "pedido.criado")
		relatorios := s.app("relatorios", "pedido.criado")
		drv := s.open()
		must(t, "migrate up", pedidos("", "migrate", "up"), 0)
		must(t, "enqueue of a type no app owns", pedidos("", "enqueue", "-t", "pedido.criado", "-k", "k1"), ExitUsage,
			`message type "pedido.criado" has no owner app`, "owners register", "nothing was enqueued")
		if n := len(s.rows(drv, "pedido.criado")); n != 0 {
			t.Fatalf("%d rows after a refused enqueue", n)
		}
		if _, ok := ownerOf(catalogOf(t, pedidos), "type", "pedido.criado"); ok {
			t.Fatal("enqueue recorded an owner")
		}
		must(t, "register", pedidos("", "owners", "register"), 0)
		must(t, "enqueue of another app's type", relatorios("", "enqueue", "-t", "pedido.criado", "-k", "k2"), ExitUsage,
			`message type "pedido.criado" is owned by app "pedidos", not app "relatorios"`, "nothing was enqueued")
		if n := len(s.rows(drv, "pedido.criado")); n != 0 {
			t.Fatalf("%d rows after a refused enqueue", n)
		}
		must(t, "enqueue by the owner", pedidos("", "enqueue", "-t", "pedido.criado", "-k", "k3"), 0, "enqueued")
		if jobs := s.rows(drv, "pedido.criado"); len(jobs) != 1 || jobs[0].Key != "k3" || jobs[0].Owner != "pedidos" {
			t.Fatalf("rows: %+v", jobs)
		}
		// The database itself refuses what the command would: a driver
		// insert of a type no app owns.
		err := drv.Insert(context.Background(), driver.InsertParams{Rows: []driver.InsertRow{{MessageID: [16]byte{1}, Type: "nota.fiscal", Key: "k", Payload: []byte("{}")}}})
		var ue *driver.UnownedTypeError
		if !errors.As(err, &ue) || ue.Type != "nota.fiscal" {
			t.Fatalf("insert of an unowned type: %v", err)
		}
	})
}

// A relay whose config routes another app's type fails at start with exit
// 2, naming both apps and the type, claims nothing and records nothing.
func TestRelayRefusesAnotherAppsType(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		pedidos := s.app("pedidos", "pedido.criado")
		relatorios := s.app("relatorios", "relatorio.pronto", "pedido.criado")
		drv := s.open()
		must(t, "migrate up", pedidos("", "migrate", "up"), 0)
		must(t, "register", pedidos("", "owners", "register"), 0)
		for i := range 20 {
			must(t, "enqueue", pedidos("", "enqueue", "-t", "pedido.criado", "-k", fmt.Sprint("p-", i)), 0)
		}
		before := catalogOf(t, pedidos)
		r := relatorios("", "relay", "--listen", "127.0.0.1:0", "--log-format", "json")
		must(t, "relay of the third app", r, ExitUsage,
			`app "relatorios" cannot start its relay`, `message type "pedido.criado" is owned by app "pedidos"`, "nothing was claimed")
		if strings.Contains(r.err, "serving health and metrics") || strings.Contains(r.err, "relay started") {
			t.Fatalf("the refused relay served or started:\n%s", r.err)
		}
		if after := catalogOf(t, pedidos); !slices.Equal(entryKeys(after), entryKeys(before)) {
			t.Fatalf("the refused relay changed the catalog: %v -> %v", entryKeys(before), entryKeys(after))
		}
		for _, j := range s.rows(drv, "pedido.criado") {
			if j.State != driver.StatePending || j.Attempt != 0 || j.LastError != "" {
				t.Fatalf("the refused relay touched row %+v", j)
			}
		}
		// status under the third app says whose the type is, and why its
		// relay will not start.
		r = relatorios("", "status")
		must(t, "status of the third app", r, 0, "pedido.criado is routed by this config but owned by app pedidos")
		if !hasRow(r.out, "pedido.criado", "pedidos", "(!)", "20") || !hasRow(r.out, "relatorio.pronto", "-", "0") {
			t.Fatalf("status:\n%s", r.out)
		}
	})
}

// dead under app X lists only X's dead letters and refuses X's commands on
// Y's rows, by id or by type, naming Y; --all-apps acts across apps.
func TestDeadScopedToApp(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		pedidos := s.app("pedidos", "pedido.criado")
		faturamento := s.app("faturamento", "fatura.emitida")
		drv := s.open()
		must(t, "migrate up", pedidos("", "migrate", "up"), 0)
		must(t, "register pedidos", pedidos("", "owners", "register"), 0)
		must(t, "register faturamento", faturamento("", "owners", "register"), 0)
		must(t, "no dead letters yet", pedidos("", "dead", "list"), 0, "no dead messages of app pedidos")
		for i := range 3 {
			must(t, "enqueue", pedidos("", "enqueue", "-t", "pedido.criado", "-k", fmt.Sprint("p-", i)), 0)
			must(t, "enqueue", faturamento("", "enqueue", "-t", "fatura.emitida", "-k", fmt.Sprint("f-", i)), 0)
		}
		kill(t, drv, "pedido.criado", "pedidos → http https://faturamento/m2m")
		kill(t, drv, "fatura.emitida", "faturamento → http https://pedidos/m2m")
		ours, theirs := s.rows(drv, "pedido.criado"), s.rows(drv, "fatura.emitida")

		r := pedidos("", "dead", "list", "--json")
		var page DeadPage
		err := json.Unmarshal([]byte(r.out), &page)
		dead := page.Messages
		if err != nil || len(dead) != 3 {
			t.Fatalf("dead list: %v %+v", err, r)
		}
		for _, d := range dead {
			if d.Type != "pedido.criado" || d.Owner != "pedidos" || d.LastRoute != "pedidos → http https://faturamento/m2m" {
				t.Fatalf("dead list shows %+v", d)
			}
		}
		r = pedidos("", "dead", "list")
		must(t, "dead list text", r, 0, "OWNER", "LAST ROUTE", "pedidos → http https://faturamento/m2m")
		if strings.Contains(r.out, "fatura.emitida") {
			t.Fatalf("dead list of pedidos shows faturamento's rows:\n%s", r.out)
		}
		must(t, "dead show of our row", pedidos("", "dead", "show", fmt.Sprint(ours[0].ID)), 0,
			"owner       pedidos", "last route  pedidos → http https://faturamento/m2m")

		id := fmt.Sprint(theirs[0].ID)
		refused := fmt.Sprintf(`message %s (type fatura.emitida) is not app pedidos's: its type is owned by app "faturamento"; nothing changed`, id)
		must(t, "dead show of their row", pedidos("", "dead", "show", id), ExitUsage, refused)
		must(t, "dead retry of their row", pedidos("", "dead", "retry", id), ExitUsage, refused)
		must(t, "dead discard of their rows", pedidos("", "dead", "discard", "--yes", id, fmt.Sprint(ours[0].ID)), ExitUsage, refused)
		must(t, "dead list of their type", pedidos("", "dead", "list", "--type", "fatura.emitida"), ExitUsage, `owned by app "faturamento"`)
		must(t, "dead retry of their type", pedidos("", "dead", "retry", "--yes", "--type", "fatura.emitida"), ExitUsage, `owned by app "faturamento"`)
		must(t, "dead discard of their type", pedidos("", "dead", "discard", "--yes", "--type", "fatura.emitida"), ExitUsage, `owned by app "faturamento"`)
		for _, j := range append(s.rows(drv, "fatura.emitida"), s.rows(drv, "pedido.criado")...) {
			if j.State != driver.StateDead {
				t.Fatalf("a refused command changed row %d: %s", j.ID, j.State)
			}
		}

		// A DBA acts across apps, explicitly.
		r = pedidos("", "dead", "list", "--all-apps", "--json")
		page = DeadPage{}
		err = json.Unmarshal([]byte(r.out), &page)
		dead = page.Messages
		if err != nil || len(dead) != 6 {
			t.Fatalf("dead list --all-apps: %v %+v", err, r)
		}
		must(t, "dead show --all-apps", pedidos("", "dead", "show", "--all-apps", id), 0, "owner       faturamento")
		must(t, "dead discard --all-apps", pedidos("", "dead", "discard", "--all-apps", id), 0, "1 dead message(s) deleted")
		// And each app on its own rows.
		must(t, "dead retry of our type", pedidos("", "dead", "retry", "--yes", "--type", "pedido.criado"), 0, "3 dead message(s) back to pending")
		if n := len(s.rows(drv, "fatura.emitida")); n != 2 {
			t.Fatalf("%d rows of faturamento left, want 2", n)
		}
		for _, j := range s.rows(drv, "fatura.emitida") {
			if j.State != driver.StateDead {
				t.Fatalf("pedidos's retry changed faturamento's row %d: %s", j.ID, j.State)
			}
		}
		// An app that owns no types has no dead letters, not everyone's.
		must(t, "dead list of an app with no types", s.app("vazio", "vazio.nada")("", "dead", "list"), 0, "app vazio owns no message types")
	})
}

// kill parks every pending row of typ as dead, as a relay would after a
// permanent refusal from route.
func kill(t *testing.T, drv driver.Driver, typ, route string) {
	t.Helper()
	ctx := context.Background()
	token := time.Now().UnixNano()
	jobs, err := drv.Claim(ctx, driver.ClaimParams{Types: []string{typ}, Limit: 100, Lease: time.Minute, Token: token})
	if err != nil || len(jobs) == 0 {
		t.Fatalf("claim %s: %d %v", typ, len(jobs), err)
	}
	p := driver.SettleParams{Token: token}
	for _, j := range jobs {
		p.Dead = append(p.Dead, driver.Failure{ID: j.ID, Error: "permanent: http 422: refused by the test", Route: route})
	}
	res, err := drv.Settle(ctx, p)
	if err != nil || len(res.Settled) != len(jobs) {
		t.Fatalf("settle %s as dead: %+v %v", typ, res, err)
	}
}

// explain prints the relay's real figures, the library's defaults where
// the config gives none, and who owns the config's types when the
// database answers.
func TestExplainFiguresAndOwners(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		pedidos := s.app("pedidos", "pedido.criado", "pedido.ordenado")
		faturamento := s.app("faturamento", "pedido.ordenado")
		r := pedidos("", "explain", "--json")
		var out explainOut
		if err := json.Unmarshal([]byte(r.out), &out); err != nil || r.code != 0 {
			t.Fatalf("explain --json: %v %+v", err, r)
		}
		// The config: lease 2s, 3 attempts, backoff 10ms doubling to
		// 50ms. Two retries wait 10ms and 20ms, and each of the three
		// attempts may hold its lease: 6.03s.
		want := explainTiming{LeaseSec: 2, MaxAttempts: 3, BackoffBaseSec: 0.01, BackoffMaxSec: 0.05, RetryHorizonSec: 6.03,
			DeliveredRetentionSec: 0, PurgeIntervalSec: 60, DefaultInboxWindowSec: 7 * 24 * 3600,
			// The 2s lease less its 500ms settle margin.
			DeliveryWindowSec: 1.5, SettleMarginSec: 0.5,
			// The flow control's defaults: the config gives none.
			RouteFailureThreshold: 5, RoutePauseSec: 1, RoutePauseMaxSec: 60, RetryAfterCeilingSec: 3600}
		if d := out.Timing.RetryHorizonSec - want.RetryHorizonSec; d > 1e-9 || d < -1e-9 {
			t.Fatalf("retry horizon %v, want %v", out.Timing.RetryHorizonSec, want.RetryHorizonSec)
		}
		out.Timing.RetryHorizonSec = want.RetryHorizonSec
		if out.Timing != want {
			t.Fatalf("timing %+v, want %+v", out.Timing, want)
		}
		if out.Ownership.Read {
			t.Fatalf("ownership read from a schema that was never migrated: %+v", out.Ownership)
		}
		must(t, "explain without the database", pedidos("", "explain"), 0, "not read:", "retry horizon  6s")

		must(t, "migrate up", pedidos("", "migrate", "up"), 0)
		must(t, "register faturamento", faturamento("", "owners", "register"), 0)
		r = pedidos("", "explain")
		must(t, "explain", r, 0, "lease          2s ", "attempts       3 ", "purge          every 1m ", "default 7d)",
			"route pause    after 5 ", "after 1s, doubling to 1m while it fails", "retry-after    up to 1h ")
		if !hasRow(r.out, "type", "pedido.criado", "no", "owner", "yet:") || !hasRow(r.out, "type", "pedido.ordenado", "app", "faturamento:", "OWNED", "BY", "ANOTHER", "APP,") {
			t.Fatalf("explain's ownership:\n%s", r.out)
		}
		r = pedidos("", "explain", "--json")
		out = explainOut{}
		if err := json.Unmarshal([]byte(r.out), &out); err != nil || !out.Ownership.Read {
			t.Fatalf("explain --json: %v %+v", err, out.Ownership)
		}
		if owner, _ := ownerOf(out.Ownership.Entries, "type", "pedido.ordenado"); owner != "faturamento" {
			t.Fatalf("ownership entries %+v", out.Ownership.Entries)
		}
		if r := pedidos("", "explain", "--no-db", "--json"); !strings.Contains(r.out, `"why": "not read (--no-db)"`) {
			t.Fatalf("explain --no-db: %+v", r)
		}
	})
}

// A relay on a schema behind its build refuses to start and says how to
// bring it up; it does not claim rows it could never settle.
func TestRelayRefusesASchemaBehindItsBuild(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		pedidos := s.app("pedidos", "pedido.criado")
		must(t, "relay on a schema never migrated", pedidos("", "relay", "--listen", ""), ExitFailure,
			"is at version 0, this build needs", "mensageria migrate up", "--migrate")
		// The version it needs is this build's newest, not the schema's.
		if r := pedidos("", "relay", "--listen", ""); strings.Contains(r.err, "this build needs 0") {
			t.Fatalf("the refusal names the schema's version as the one needed: %s", r.err)
		}
	})
}
