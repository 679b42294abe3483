package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

// killMarked parks every pending row of typ as dead after an at-most-once
// attempt marked it, as a relay does when the receiver refused the request
// or an operator resolved the doubt as dead: the row keeps its mark.
func killMarked(t *testing.T, drv driver.Driver, typ string) {
	t.Helper()
	ctx := context.Background()
	token := time.Now().UnixNano()
	jobs, err := drv.Claim(ctx, driver.ClaimParams{Types: []string{typ}, Limit: 100, Lease: time.Minute, Token: token})
	if err != nil || len(jobs) == 0 {
		t.Fatalf("claim %s: %d %v", typ, len(jobs), err)
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	amo, ok := drv.(driver.AtMostOnce)
	if !ok {
		t.Fatal("the driver keeps no marks")
	}
	if marked, err := amo.Mark(ctx, driver.MarkParams{Token: token, IDs: ids}); err != nil || len(marked) != len(ids) {
		t.Fatalf("mark: %v %v", marked, err)
	}
	p := driver.SettleParams{Token: token}
	for _, id := range ids {
		p.Dead = append(p.Dead, driver.Failure{ID: id, Error: "permanent: http 409: refused by the test", Route: "lancamentos → http https://legado/m2m"})
	}
	if res, err := drv.Settle(ctx, p); err != nil || len(res.Settled) != len(ids) {
		t.Fatalf("settle as dead: %+v %v", res, err)
	}
}

func rowByID(t *testing.T, drv driver.Driver, id int64) driver.Job {
	t.Helper()
	jobs, err := drv.ListMessages(context.Background(), driver.ListFilter{IDs: []int64{id}, Limit: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("row %d: %v %v", id, jobs, err)
	}
	return jobs[0]
}

// dead retry of a dead letter an at-most-once attempt marked used to say
// "back to pending" and exit 0 while the row turned in doubt, never sent.
// It is now refused, naming the rows, unless --allow-duplicate, which
// clears the mark (with a warning) so the relay really sends it again.
func TestDeadRetryOfAtMostOnceRow(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		app := s.app("lancamentos", "lancamento.criado")
		drv := s.open()
		must(t, "migrate up", app("", "migrate", "up"), 0)
		must(t, "register", app("", "owners", "register"), 0)
		for i := range 2 {
			must(t, "enqueue", app("", "enqueue", "-t", "lancamento.criado", "-k", fmt.Sprint("l-", i)), 0)
		}
		killMarked(t, drv, "lancamento.criado")
		rows := s.rows(drv, "lancamento.criado")
		one := fmt.Sprint(rows[0].ID)

		must(t, "dead retry of a marked row", app("", "dead", "retry", one), ExitUsage,
			"belong to at_most_once routes", "may apply the effect twice; nothing changed", "--allow-duplicate", "doubt resolve")
		must(t, "dead retry --type of marked rows", app("", "dead", "retry", "--yes", "--type", "lancamento.criado"), ExitUsage,
			"2 dead message(s)", "nothing changed")
		for _, j := range s.rows(drv, "lancamento.criado") {
			if j.State != driver.StateDead || j.AttemptedAt == nil {
				t.Fatalf("a refused retry changed row %d: %s, marked %v", j.ID, j.State, j.AttemptedAt != nil)
			}
		}
		// The driver itself never turns a marked dead letter into a doubt.
		if n, err := drv.Revive(context.Background(), driver.ReviveParams{IDs: []int64{rows[0].ID}}); err != nil || n != 0 {
			t.Fatalf("Revive without ClearMark: %d %v, want 0 changed", n, err)
		}

		r := app("", "dead", "retry", "--allow-duplicate", one)
		must(t, "dead retry --allow-duplicate", r, 0, "1 dead message(s) back to pending", "warning:", "may have reached the receiver")
		if j := rowByID(t, drv, rows[0].ID); j.State != driver.StatePending || j.AttemptedAt != nil {
			t.Fatalf("after --allow-duplicate row is %s, marked %v; want pending, unmarked (sent again)", j.State, j.AttemptedAt != nil)
		}
		must(t, "dead retry --allow-duplicate --type", app("", "dead", "retry", "--yes", "--allow-duplicate", "--type", "lancamento.criado"), 0,
			"1 dead message(s) back to pending")
		for _, j := range s.rows(drv, "lancamento.criado") {
			if j.State != driver.StatePending || j.AttemptedAt != nil {
				t.Fatalf("row %d is %s, marked %v", j.ID, j.State, j.AttemptedAt != nil)
			}
		}
		// Really sent again: the relay's claim takes both.
		jobs, err := drv.Claim(context.Background(), driver.ClaimParams{Types: []string{"lancamento.criado"}, Limit: 10, Lease: time.Minute, Token: 77})
		if err != nil || len(jobs) != 2 {
			t.Fatalf("claim after --allow-duplicate: %d rows, %v; want both", len(jobs), err)
		}
	})
}

// dead retry and discard of an id that is no dead letter used to exit 0;
// they now fail, naming each id left alone and why, and act on the others.
func TestDeadRetryDiscardMissingIDs(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		app := s.app("pedidos", "pedido.criado")
		drv := s.open()
		must(t, "migrate up", app("", "migrate", "up"), 0)
		must(t, "register", app("", "owners", "register"), 0)
		for i := range 3 {
			must(t, "enqueue", app("", "enqueue", "-t", "pedido.criado", "-k", fmt.Sprint("p-", i)), 0)
		}
		kill(t, drv, "pedido.criado", "pedidos → http https://faturamento/m2m")
		rows := s.rows(drv, "pedido.criado")
		must(t, "enqueue a pending one", app("", "enqueue", "-t", "pedido.criado", "-k", "vivo"), 0)
		var pending int64
		for _, j := range s.rows(drv, "pedido.criado") {
			if j.State == driver.StatePending {
				pending = j.ID
			}
		}

		for _, verb := range []string{"retry", "discard"} {
			must(t, "dead "+verb+" of a missing id", app("", "dead", verb, "987654"), ExitFailure,
				"987654 (no such message)", "nothing changed")
			must(t, "dead "+verb+" of a pending id", app("", "dead", verb, fmt.Sprint(pending)), ExitFailure,
				fmt.Sprintf("%d (pending, not dead)", pending))
		}
		r := app("", "dead", "retry", "--yes", fmt.Sprint(rows[0].ID), "987654")
		must(t, "dead retry of found and missing ids", r, ExitFailure, "1 dead message(s) back to pending", "left alone: 987654 (no such message)")
		r = app("", "dead", "discard", "--yes", "--json", fmt.Sprint(rows[1].ID), "987655")
		must(t, "dead discard --json of found and missing ids", r, ExitFailure, `"changed":1`, `"left_alone":["987655 (no such message)"]`)
		if j := rowByID(t, drv, rows[2].ID); j.State != driver.StateDead {
			t.Fatalf("row %d not named was changed: %s", j.ID, j.State)
		}
	})
}

// A type or key holding a bidi override, a zero-width space or a
// terminal escape is printed with the code point spelled out by the text
// output of dead, status and owners, so that it cannot read as another
// name (or drive the terminal); --json keeps the value as stored.
func TestTextOutputSpellsOutInvisibleCharacters(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		app := s.app("pedidos", "pedido.criado")
		drv := s.open()
		must(t, "migrate up", app("", "migrate", "up"), 0)
		const sneaky = "pedido.\u202eodairc"
		ctx := context.Background()
		if _, err := drv.Register(ctx, driver.RegisterParams{App: "pedidos", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: sneaky}}}); err != nil {
			t.Fatal(err)
		}
		if err := drv.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: [16]byte{1, 2, 3}, Type: sneaky, Key: "k\u200b\x1b[2J", Payload: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
		kill(t, drv, sneaky, "pedidos → http https://faturamento/m2m")
		id := fmt.Sprint(s.rows(drv, sneaky)[0].ID)
		for _, r := range []result{
			app("", "dead", "list"),
			app("", "dead", "show", id),
			app("", "status"),
			app("", "owners", "list"),
		} {
			must(t, "text output", r, 0, "pedido.<U+202E>odairc")
			if strings.ContainsAny(r.out+r.err, "\u202e\u200b\x1b") {
				t.Fatalf("text output holds an invisible character:\n%q", r.out)
			}
		}
		must(t, "dead show key", app("", "dead", "show", id), 0, "k<U+200B><U+001B>[2J")
		must(t, "dead list --json keeps the value", app("", "dead", "list", "--json"), 0, "\"type\":\""+sneaky+"\"")
	})
}

// --limit out of 1..10000 used to list 100 silently, and --json never
// said that more followed; it is now refused, and a page says whether it
// is cut short and where the next one starts.
func TestListLimitAndTruncation(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		app := s.app("pedidos", "pedido.criado")
		drv := s.open()
		must(t, "migrate up", app("", "migrate", "up"), 0)
		must(t, "register", app("", "owners", "register"), 0)
		for i := range 3 {
			must(t, "enqueue", app("", "enqueue", "-t", "pedido.criado", "-k", fmt.Sprint("p-", i)), 0)
		}
		kill(t, drv, "pedido.criado", "pedidos → http https://faturamento/m2m")
		for _, cmd := range []string{"dead", "doubt"} {
			for _, l := range []string{"0", "-5", "10001"} {
				must(t, cmd+" list --limit "+l, app("", cmd, "list", "--limit", l), ExitUsage, "--limit must be between 1 and 10000, got "+l)
			}
		}
		var page DeadPage
		r := app("", "dead", "list", "--json", "--limit", "2")
		if err := json.Unmarshal([]byte(r.out), &page); err != nil || len(page.Messages) != 2 || !page.Truncated || page.NextAfter != page.Messages[1].ID {
			t.Fatalf("first page: %v %+v", err, r)
		}
		r = app("", "dead", "list", "--json", "--limit", "2", "--after", fmt.Sprint(page.NextAfter))
		page = DeadPage{}
		if err := json.Unmarshal([]byte(r.out), &page); err != nil || len(page.Messages) != 1 || page.Truncated || page.NextAfter != 0 {
			t.Fatalf("last page: %v %+v", err, r)
		}
		must(t, "text page", app("", "dead", "list", "--limit", "2"), 0, "more follow: next page with --after")
		if r := app("", "dead", "list", "--limit", "3"); strings.Contains(r.out, "more follow") {
			t.Fatalf("a page that holds every row says more follow:\n%s", r.out)
		}
		var doubts DoubtPage
		r = app("", "doubt", "list", "--json")
		if err := json.Unmarshal([]byte(r.out), &doubts); err != nil || doubts.Messages == nil || len(doubts.Messages) != 0 || doubts.Truncated {
			t.Fatalf("doubt list: %v %+v", err, r)
		}
	})
}

// owners transfer --to "   " used to be accepted, and the migrations
// moved to a blank app locked every app out of migrate up. Every app name
// is now checked by one function: the configs, register and transfer
// (command and drivers alike); --from only has to match the entry.
func TestAppNamesAreChecked(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		app := s.app("pedidos", "pedido.criado")
		drv := s.open()
		must(t, "migrate up", app("", "migrate", "up"), 0)
		must(t, "register", app("", "owners", "register"), 0)
		for _, bad := range []string{"   ", " pedidos", "ped\u202eidos", "ped\x00idos", "ped idos", strings.Repeat("a", 101), "-pedidos"} {
			must(t, fmt.Sprintf("transfer type to %q", bad), app("", "owners", "transfer", "type", "pedido.criado", "--from", "pedidos", "--to", bad), ExitUsage,
				"owners transfer --to:", "must be 1-100 letters, digits or ._:-", "nothing changed")
			must(t, fmt.Sprintf("transfer migrations to %q", bad), app("", "owners", "transfer", "migrations", "schema", "--from", "pedidos", "--to", bad), ExitUsage,
				"nothing changed")
			ctx := context.Background()
			if err := drv.Transfer(ctx, driver.TransferParams{Kind: driver.ResourceMigrations, Name: driver.MigrationsName, From: "pedidos", To: bad}); !errors.Is(err, driver.ErrInvalidApp) {
				t.Fatalf("driver Transfer to %q: %v, want ErrInvalidApp", bad, err)
			}
			if _, err := drv.Register(ctx, driver.RegisterParams{App: bad, Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "x.y"}}}); !errors.Is(err, driver.ErrInvalidApp) {
				t.Fatalf("driver Register of %q: %v, want ErrInvalidApp", bad, err)
			}
			p := writeFile(t, fmt.Sprintf("database: %s\nschema: %s\napp: %q\nroutes:\n  - type: x.y\n    http: {url: http://127.0.0.1:1/m2m, token: tok}\n", s.db, s.schema, bad))
			must(t, fmt.Sprintf("a config with app %q", bad), run(t, "", nil, "migrate", "check", "--config", p), ExitUsage, "app")
		}
		must(t, "the migrations still pedidos's", app("", "migrate", "up"), 0)
		must(t, "a good name moves", app("", "owners", "transfer", "type", "pedido.criado", "--from", "pedidos", "--to", "faturamento-2"), 0, "moved")
	})
}

// status, dead list, migrate check and every other command that reads or
// acts on an existing database used to create an empty SQLite file at a
// mistyped path; they now say the file does not exist and leave none.
// migrate up still creates it.
func TestOperatorCommandsNeverCreateASQLiteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tpyo.db")
	p := writeFile(t, fmt.Sprintf("database: sqlite:%s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    http: {url: http://127.0.0.1:1/m2m, token: tok}\n", path))
	for _, args := range [][]string{
		{"status"}, {"dead", "list"}, {"dead", "show", "1"}, {"dead", "retry", "1"}, {"doubt", "list"},
		{"migrate", "check"}, {"owners", "list"}, {"owners", "register"},
	} {
		r := run(t, "", nil, append(args, "--config", p)...)
		must(t, strings.Join(args, " "), r, ExitFailure, "sqlite:"+path+": the file does not exist", "never creates it")
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left a file at %s: %v", strings.Join(args, " "), path, err)
		}
	}
	must(t, "migrate up creates it", run(t, "", nil, "migrate", "up", "--config", p), 0, "migrated")
	must(t, "then status reads it", run(t, "", nil, "status", "--config", p), 0)
}
