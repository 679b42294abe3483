package clienttest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriatest"
)

// sqlColumn is one column a SQL producer may write, and the values drawn
// for it: SQL expressions, good and bad, that a plain INSERT may give.
type sqlColumn struct {
	name   string
	values []string
}

// producerColumns are, per backend, the columns of an enqueue and values a
// careless or hostile producer writes into them. Left out are what only a
// relay or an operator writes (state, lease and mark columns: a row
// INSERTed as dead or marked is not an enqueue) and a time in the future
// for available_at, which is a message scheduled for then; unguarded runs
// also leave out what the migrations park rather than any claim reading it
// (a never-due available_at).
func producerColumns(backend string, guarded bool) []sqlColumn {
	switch backend {
	case "postgres":
		times := []string{"now()", "'-infinity'", "'0001-01-01 00:00:00+00'", "'0001-01-01 00:00:00.000001+00'",
			"'4713-01-01 00:00:00+00 BC'", "'1970-01-01 00:00:00+00'", "'9999-12-31 23:59:59.999999+00'"}
		created := append([]string{"'infinity'", "'10000-01-01 00:00:00+00'", "'294276-12-31 23:59:59+00'"}, times...)
		available := []string{"now()", "'-infinity'", "'0001-01-01 00:00:00+00'", "'4713-01-01 00:00:00+00 BC'", "'1970-01-01 00:00:00+00'"}
		if guarded {
			available = append(available, "'infinity'", "'10000-01-01 00:00:00+00'")
		}
		return []sqlColumn{
			{"message_id", []string{"gen_random_uuid()", "'order-0001-created-by-java-app-00001'", "'00000000-0000-0000-0000-000000000000'", "''"}},
			{"payload", []string{"'{}'", "'[]'", "'null'", `'"x"'`, "'1e400'", `'{"a": "\u0000"}'`, `'{"a": "\ud800"}'`, "'{\"a\":1, \"a\":2}'", "'not json'"}},
			{"headers", []string{"'{}'", `'{"a": "b"}'`, `'{"n": 1}'`, "'[]'", "'null'", `'""'`, `'{"": "x"}'`, `'{"a": "\u0000"}'`, `'{"a": "\ud800"}'`, `'{"a":"1","a":"2"}'`}},
			{"created_at", created},
			{"available_at", available},
			{"attempts", []string{"0", "1", "19", "20", "-1", "-2147483648", "2147483647", "NULL"}},
			{"last_error", []string{"NULL", "''", "'an old error'"}},
		}
	case "mysql":
		lo, hi := "-62135596800000000", "253402300800000000"
		available := []string{"0", "1", "1.5", "-9223372036854775808", lo, "'1700000000000000'"}
		if guarded {
			available = append(available, "'soon'", hi)
		}
		return []sqlColumn{
			{"message_id", []string{"UUID()", "'0190F0E2-7C3B-7DEF-8ABC-0123456789AB'", "'order-0001-created-by-java-app-00001'",
				"'{0190f0e2-7c3b-7def-8abc-0123456789a}'", "'zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz'", "''", "NULL"}},
			{"key", []string{"'k'", "5", "1.5", "x'6b'", "''", "NULL"}},
			{"payload", []string{"'{}'", "'[1]'", "'null'", `'"x"'`, "'1e400'", `'{"a":1,"a":2}'`, "'not json'", "5", "NULL"}},
			{"headers", []string{"NULL", "'{}'", `'{"a":"b"}'`, `'{"n":1}'`, "'[1]'", "'null'", "5", `'{"":"x"}'`, `'{"a":"1","a":"2"}'`}},
			{"created_at", []string{"0", "1700000000000000", "'yesterday'", "1.5", "'1700000000000000'", lo, hi, "9223372036854775807", "-9223372036854775808", "NULL"}},
			{"available_at", available},
			{"attempts", []string{"0", "1", "-1", "9223372036854775807", "'many'", "1.5", "NULL"}},
			{"last_error", []string{"NULL", "''", "5"}},
		}
	default:
		lo, hi := "-62135596800000000", "253402300800000000"
		available := []string{"0", "1", "1.5", "-9223372036854775808", lo, "'1700000000000000'"}
		if guarded {
			available = append(available, "'soon'", "x'00'", hi)
		}
		return []sqlColumn{
			{"message_id", []string{"'0190f0e2-7c3b-7def-8abc-0123456789ab'", "'0190F0E2-7C3B-7DEF-8ABC-0123456789AB'", "'order-0001-created-by-java-app-00001'",
				"'{0190f0e2-7c3b-7def-8abc-0123456789a}'", "'zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz'", "randomblob(36)", "123456789012345678901234567890123456", "NULL", "''"}},
			{"key", []string{"'k'", "5", "1.5", "x'6b'", "''", "NULL"}},
			{"payload", []string{"'{}'", "'[1]'", "'null'", "x'7b7d'", "x'00'", "jsonb('{\"a\":1}')", "'not json'", "5"}},
			{"headers", []string{"NULL", "'{}'", `'{"a":"b"}'`, `'{"n":1}'`, "'[1]'", "x'7b7d'", "5", `'{"":"x"}'`}},
			{"created_at", []string{"0", "1700000000000000", "'yesterday'", "1.5", "'1700000000000000'", lo, hi, "9223372036854775807", "-9223372036854775808", "x'00'", "NULL"}},
			{"available_at", available},
			{"attempts", []string{"0", "1", "-1", "9223372036854775807", "'many'", "1.5", "NULL"}},
			{"last_error", []string{"NULL", "''", "5"}},
		}
	}
}

// The property of issue 24: every row a plain INSERT accepts is delivered
// or parked dead with a reason, and never stops another row from being
// delivered. One relay runs through all the draws; each draw INSERTs rows
// whose columns are drawn from producerColumns (each column left to its
// default or given a drawn value), then a good row, and waits until every
// row the database accepted is either sent or dead with a last_error.
// Guarded runs have the rules of PostgreSQL migration 12, SQLite
// migration 7 and MySQL's enqueue triggers, which refuse most of these rows at the INSERT; unguarded
// runs drop those rules first, as a database written before them, so the
// relay's own reading of each row apart is what holds.
func TestAnyRowAPlainInsertAcceptsIsDeliveredOrParked(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		name := map[bool]string{true: "guarded", false: "unguarded"}[guarded]
		t.Run(name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b *backend) {
				anyRowProperty(t, b, guarded)
			})
		})
	}
}

func anyRowProperty(t *testing.T, b *backend, guarded bool) {
	if !guarded {
		var drop []string
		switch b.name {
		case "postgres":
			for _, c := range []string{"created_at", "available_at", "lease_until", "attempted_at"} {
				drop = append(drop, "ALTER TABLE "+b.table("outbox")+" DROP CONSTRAINT outbox_"+c+"_readable")
			}
		case "sqlite":
			drop = append(drop, "DROP TRIGGER mensageria_outbox_enqueue_readable")
		case "mysql":
			drop = append(drop, "DROP TRIGGER "+b.table("outbox_enqueue_readable"))
		default:
			t.Fatalf("no rules to drop for backend %s", b.name)
		}
		for _, s := range drop {
			if err := b.exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	app := uniqueApp("anyrow")
	typ := app + ".t"
	rec := &recorder{}
	cfg := fastConfig(app, mensageria.NewRegistry().MustRegister(typ, rec))
	drv := b.open()
	c := newClient(t, drv, cfg)
	start(t, c)
	delivered := func(id int64) bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, d := range rec.got {
			if d.Seq == id {
				return true
			}
		}
		return false
	}
	cols := producerColumns(b.name, guarded)
	o := b.table("outbox")
	accepted, refused := 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		var ids []int64
		rows := rapid.IntRange(1, 4).Draw(rt, "rows")
		for r := range rows {
			names, values := []string{"type", "key"}, []string{"'" + typ + "'", fmt.Sprintf("'k%d'", r)}
			for _, col := range cols {
				if !rapid.Bool().Draw(rt, col.name+"?") {
					continue // its default
				}
				v := rapid.SampledFrom(col.values).Draw(rt, col.name)
				if col.name == "key" {
					values[1] = v
					continue
				}
				names, values = append(names, col.name), append(values, v)
			}
			id, err := b.insertID("INSERT INTO " + o + " (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(values, ", ") + ")")
			if err != nil {
				refused++
				continue // refused: nothing stored, nothing owed
			}
			accepted++
			ids = append(ids, id)
		}
		good, err := b.insertID("INSERT INTO " + o + " (type, key) VALUES ('" + typ + "', 'good')")
		if err != nil {
			rt.Fatalf("the good row: %v", err)
		}
		settled := func(id int64) bool {
			return delivered(id) || b.count("SELECT count(*) FROM "+o+" WHERE id = "+fmt.Sprint(id)+" AND state = 'dead' AND last_error LIKE 'unreadable row: %'") == 1
		}
		mensageriatest.Eventually(rt, 20*time.Second, func() bool {
			for _, id := range ids {
				if !settled(id) {
					return false
				}
			}
			return delivered(good)
		}, fmt.Sprintf("rows %v delivered or parked dead with a reason, and the good row %d after them delivered", ids, good))
		if _, err := drv.Stats(context.Background()); err != nil {
			rt.Fatalf("Stats: %v", err)
		}
	})
	t.Logf("%s: %d drawn rows accepted, %d refused at the INSERT", b.name, accepted, refused)
}
