package sqlite

import (
	"testing"

	"github.com/xadm/mensageria/driver/sqlkit"
)

// Every file of queries/ is a statement the driver loads, and every
// statement it loads has every fragment filled in (sqlkit.CheckQueries).
func TestEveryQueryFileIsLoaded(t *testing.T) {
	const prefix = "mensageria_"
	if err := sqlkit.CheckQueries(files, "queries", fragments(prefix), loadQueries(prefix), nil); err != nil {
		t.Error(err)
	}
}
