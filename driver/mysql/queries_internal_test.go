package mysql

import (
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver/sqlkit"
)

// Every file of queries/ is a statement the driver loads, and every
// statement it loads has every fragment filled in but the lists a call
// fills (sqlkit.CheckQueries).
func TestEveryQueryFileIsLoaded(t *testing.T) {
	const prefix = "mensageria_"
	lists := func(q string) string { return withLists(withList(q, 2), 2, 2) }
	if err := sqlkit.CheckQueries(queryFS, "queries", fragments(prefix), loadQueries(prefix), lists); err != nil {
		t.Error(err)
	}
}

// withRows repeats an INSERT's VALUES row, the comment's mention of
// VALUES and the statement's closing semicolon notwithstanding.
func TestWithRows(t *testing.T) {
	q := loadQueries("p_")
	got := withRows(q.insertScheduled, 3)
	row := "(?, ?, ?, ?, ?, GREATEST(?, " + nowExpr + "))"
	if !strings.HasSuffix(got, "VALUES "+row+", "+row+", "+row) || strings.Count(got, "?") != 18 {
		t.Fatalf("withRows(insert_scheduled, 3) = %q", got)
	}
	if got := withRows(q.insert, 1); !strings.HasSuffix(got, "INSERT INTO p_outbox (message_id, type, `key`, payload, headers)\nVALUES (?, ?, ?, ?, ?)") {
		t.Fatalf("withRows(insert, 1) = %q", got)
	}
}
