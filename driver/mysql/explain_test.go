package mysql_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver/mysql"
)

// digits is n from 0 to 99,999: no sequence table or recursion limit
// that differs between MariaDB and MySQL.
const digits = `(SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n FROM
	(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a,
	(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b,
	(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c,
	(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e,
	(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) f) g`

// planStep is one row of EXPLAIN: the table (or alias) read, how, and
// with which index.
type planStep struct{ table, access, key string }

func (s planStep) String() string { return s.table + " " + s.access + " " + s.key }

// explain is the server's plan of q with args, one step a table read;
// MariaDB and MySQL name the columns alike, in different places.
func explain(t *testing.T, db *sql.DB, q string, args ...any) []planStep {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+q, args...)
	if err != nil {
		t.Fatalf("EXPLAIN: %v\n%s", err, q)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var plan []planStep
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		var s planStep
		for i, c := range cols {
			switch strings.ToLower(c) {
			case "table":
				s.table = vals[i].String
			case "type":
				s.access = vals[i].String
			case "key":
				s.key = vals[i].String
			}
		}
		plan = append(plan, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// cases is the arguments of a statement's CASE lists ({{cases}}): for
// each value, in order, one (id, value) pair for each of ids.
func cases(ids []any, values ...any) []any {
	var out []any
	for _, v := range values {
		for _, id := range ids {
			out = append(out, id, v)
		}
	}
	return out
}

// The relay's hot statements and the inbox queue's claim keep to their
// indexes on a table whose rows are mostly other types' (and other
// consumers'), whether the server has recalculated its statistics since
// the rows came or not: the claim walks its type's range of outbox_claim
// (an ordered type's head test probes outbox_key; without the index hint
// of queries/claim_ordered.sql MariaDB was seen to test it on
// outbox_delivered before ANALYZE), the claim of many types its types'
// ranges of outbox_claim, the settles and the mark find their rows by the
// primary key, the idle relay's next-due read walks its types' ranges of
// outbox_claim from the statement's own clock, the inbox claim walks its
// consumer's range of inbox_queue_claim. None reads a whole table ("ALL")
// or a whole index ("index").
func TestHotStatementsKeepToTheirIndexes(t *testing.T) {
	d, _ := migrated(t)
	ctx := t.Context()
	db := d.DB()
	own(t, d, "plan", "mine", "ord", "theirs.0", "theirs.1", "theirs.2", "theirs.3", "theirs.4")
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	stmts := mysql.Queries(d)
	var now int64
	if err := db.QueryRowContext(ctx, stmts["clock"]).Scan(&now); err != nil {
		t.Fatal(err)
	}
	p := d.Table("")
	ids := []any{int64(40001), int64(40002)}
	cases := []struct {
		name  string
		args  []any
		index map[string]string // table or alias -> the index it must be read by
	}{
		{"claim", []any{now, "mine", 100}, map[string]string{"o": p + "outbox_claim"}},
		{"claimOrdered", []any{now, "ord", 100}, map[string]string{"o": p + "outbox_claim", "b": p + "outbox_key"}},
		{"claimMany", []any{now, "mine", "theirs.0", "ord", "theirs.1", 100}, map[string]string{"o": p + "outbox_claim", "b": p + "outbox_key"}},
		{"settleLock", append(ids, int64(7), now), map[string]string{p + "outbox": "PRIMARY"}},
		{"settleDelivered", ids, map[string]string{p + "outbox": "PRIMARY"}},
		{"settleDeliveredKept", append([]any{now}, ids...), map[string]string{p + "outbox": "PRIMARY"}},
		{"settleRelease", append([]any{now}, ids...), map[string]string{p + "outbox": "PRIMARY"}},
		{"settleRetry", append(cases(ids, now, 0, "e", "r"), ids...), map[string]string{p + "outbox": "PRIMARY"}},
		{"settleDead", append(append([]any{now}, cases(ids, "e", "r")...), ids...), map[string]string{p + "outbox": "PRIMARY"}},
		{"settleInDoubt", append(append([]any{now}, cases(ids, now, "e", "r")...), ids...), map[string]string{p + "outbox": "PRIMARY"}},
		{"claimLease", append([]any{int64(7), now, now}, ids...), map[string]string{p + "outbox": "PRIMARY"}},
		{"nextDue", []any{"mine", "theirs.0"}, map[string]string{p + "outbox": p + "outbox_claim"}},
		{"markLock", append(ids, int64(7)), map[string]string{p + "outbox": "PRIMARY"}},
		{"mark", ids, map[string]string{p + "outbox": "PRIMARY"}},
		{"queueClaim", []any{"mine", 100}, map[string]string{p + "inbox_queue": p + "inbox_queue_claim"}},
	}
	check := func(phase string) {
		t.Helper()
		for _, c := range cases {
			plan := explain(t, db, stmts[c.name], c.args...)
			seen := map[string]bool{}
			for _, s := range plan {
				if s.access == "ALL" || s.access == "index" {
					t.Errorf("%s, %s: reads the whole of %s: %v", phase, c.name, s.table, plan)
				}
				if want, ok := c.index[s.table]; ok {
					seen[s.table] = true
					if s.key != want {
						t.Errorf("%s, %s: reads %s by %q, want %q: %v", phase, c.name, s.table, s.key, want, plan)
					}
				}
			}
			for table := range c.index {
				if !seen[table] {
					t.Errorf("%s, %s: no step reads %s: %v", phase, c.name, table, plan)
				}
			}
		}
	}
	// No empty phase: the server plans each statement when it runs,
	// so an empty table's plan is never kept for a full one.

	// 40,000 outbox rows: other types' pending rows, and this app's rows
	// delivered and kept; then 300 due rows of each claimed type, an
	// ordered type's on 20 keys.
	exec(fmt.Sprintf(`INSERT INTO %soutbox (type, `+"`key`"+`, payload, state, delivered_at)
		SELECT CASE WHEN n %% 4 = 0 THEN 'mine' ELSE CONCAT('theirs.', n %% 5) END, CONCAT('k', n), '{}',
		       CASE WHEN n %% 4 = 0 THEN 'delivered' ELSE 'pending' END, CASE WHEN n %% 4 = 0 THEN n END
		  FROM %s WHERE n < 40000 ORDER BY n`, p, digits))
	exec(fmt.Sprintf("INSERT INTO %soutbox (type, `key`, payload) SELECT IF(n < 300, 'mine', 'ord'), CONCAT('k', n %% 20), '{}' FROM %s WHERE n < 600 ORDER BY n", p, digits))
	// 40,000 applied inbox queue rows of other consumers, 300 pending of
	// this one.
	exec(fmt.Sprintf(`INSERT INTO %sinbox_queue (consumer, type, `+"`key`"+`, message_id, payload, headers, created_at, received_at, available_at, state)
		SELECT IF(n < 40000, CONCAT('theirs.', n %% 5), 'mine'), 't', CONCAT('k', n), UUID(), '{}', '{}', n, n, n, IF(n < 40000, 'applied', 'pending')
		  FROM %s WHERE n < 40300 ORDER BY n`, p, digits))
	check("full tables, statistics as they came")
	for _, table := range []string{"outbox", "inbox_queue"} {
		exec("ANALYZE TABLE " + p + table)
	}
	check("full tables, analyzed")
}
