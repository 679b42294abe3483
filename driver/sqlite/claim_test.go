package sqlite_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// One claim of many types, more than a compound SELECT of one branch a
// type could hold (SQLite allows 500), keeps every rule of a claim of a
// few: the oldest due rows first, up to the limit, and of an ordered type
// only the head of each key.
func TestClaimOfManyTypes(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	const n = 600
	var types, ordered []string
	var rows []driver.InsertRow
	for i := range n {
		typ := fmt.Sprintf("t%03d", i)
		types = append(types, typ)
		if i%2 == 0 {
			ordered = append(ordered, typ)
		}
		for range 2 { // two rows of one key: the second waits behind the first when ordered
			rows = append(rows, driver.InsertRow{MessageID: uuid.New(), Type: typ, Key: "k", Payload: []byte(`{}`)})
		}
	}
	own(t, d, "a", types...)
	if err := d.Insert(t.Context(), driver.InsertParams{Rows: rows}); err != nil {
		t.Fatal(err)
	}
	claim := func(token int64, limit int) []int64 {
		t.Helper()
		jobs, err := d.Claim(t.Context(), driver.ClaimParams{Types: types, OrderedTypes: ordered, Limit: limit, Lease: time.Minute, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		return ids
	}
	// Ids 1, 2 are t000's (ordered: 2 waits), 3, 4 t001's (both go), ...
	if got, want := claim(1, 5), []int64{1, 3, 4, 5, 7}; !slices.Equal(got, want) {
		t.Fatalf("the first claim of 5 took %v, want the oldest due rows %v", got, want)
	}
	rest := claim(2, 10000)
	if want := n/2 + n - 5; len(rest) != want {
		t.Fatalf("the second claim took %d rows, want %d (every plain type's two, every ordered type's head)", len(rest), want)
	}
	for _, id := range rest {
		if id%4 == 2 {
			t.Fatalf("claimed row %d, the second row of an ordered type's key, while its head is leased", id)
		}
	}
}
