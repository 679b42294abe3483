package sqlite

import (
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Every file of queries/ is a statement the driver loads, and every
// statement it loads has every fragment filled in: a file no field holds
// is a statement nothing runs, and a "{{" left over is a name SQLite would
// refuse only when the statement first runs.
func TestEveryQueryFileIsLoaded(t *testing.T) {
	const prefix = "mensageria_"
	names, err := fs.Glob(files, "queries/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var loaded []string
	q := reflect.ValueOf(loadQueries(prefix))
	for i := range q.NumField() {
		text := q.Field(i).String()
		if strings.Contains(text, "{{") {
			t.Errorf("queries.%s keeps a fragment unfilled:\n%s", q.Type().Field(i).Name, text)
		}
		loaded = append(loaded, text)
	}
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(loaded, fragments(prefix).Replace(string(b))) {
			t.Errorf("%s is loaded into no field of queries", name)
		}
	}
	if len(names) != q.NumField() {
		t.Errorf("%d files in queries/, %d fields in queries", len(names), q.NumField())
	}
}
