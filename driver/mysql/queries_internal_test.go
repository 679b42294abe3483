package mysql

import (
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Every file of queries/ is a statement the driver loads, and every
// statement it loads has every fragment filled in but the lists a call
// fills: a file no field holds is a statement nothing runs, and a "{{"
// left over is a name the server would refuse only when the statement
// first runs.
func TestEveryQueryFileIsLoaded(t *testing.T) {
	const prefix = "mensageria_"
	names, err := fs.Glob(queryFS, "queries/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var loaded []string
	q := reflect.ValueOf(loadQueries(prefix))
	for i := range q.NumField() {
		text := q.Field(i).String()
		if filled := withLists(withList(text, 2), 2, 2); strings.Contains(filled, "{{") {
			t.Errorf("queries.%s keeps a fragment unfilled:\n%s", q.Type().Field(i).Name, filled)
		}
		loaded = append(loaded, text)
	}
	for _, name := range names {
		b, err := queryFS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(loaded, fragments(prefix).Replace(string(b))) {
			t.Errorf("%s is loaded into no field of queries", name)
		}
		if !strings.HasPrefix(string(b), "-- ") {
			t.Errorf("%s does not start with a comment saying what it does", name)
		}
	}
	if len(names) != q.NumField() {
		t.Errorf("%d files in queries/, %d fields in queries", len(names), q.NumField())
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
