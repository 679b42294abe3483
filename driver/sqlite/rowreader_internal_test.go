package sqlite

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// valueOf is a value as the SQLite driver hands one back from a column a
// plain INSERT filled: NULL, an integer, a real, text or a blob.
func valueOf(kind uint8, n int64, b []byte) any {
	switch kind % 5 {
	case 0:
		return nil
	case 1:
		return n
	case 2:
		return math.Float64frombits(uint64(n))
	case 3:
		return string(b)
	}
	return b
}

// The claim reads every column a plain INSERT may have filled with the
// wrong thing through rowReader: whatever the value, it never panics, and
// it either reads the value as the column's type or names the column in
// the row's reason, never both, never neither.
func FuzzRowReader(f *testing.F) {
	f.Add(uint8(3), int64(0), []byte("order-0001-created-by-java-app-00001"))
	f.Add(uint8(3), int64(0), []byte("0190f0e2-7c3b-7def-8abc-0123456789ab"))
	f.Add(uint8(4), int64(0), []byte(`{"a":"b"}`))
	f.Add(uint8(1), int64(math.MaxInt64), []byte(nil))
	f.Add(uint8(2), int64(math.Float64bits(1.5)), []byte(nil))
	f.Fuzz(func(t *testing.T, kind uint8, n int64, b []byte) {
		v := valueOf(kind, n, b)
		check := func(column string, why string, readable bool) {
			t.Helper()
			named := strings.Contains(why, column+" ")
			if readable == named {
				t.Fatalf("%s of %#v: readable %v, reason %q", column, v, readable, why)
			}
		}
		var why string
		r := rowReader{why: &why}
		id := r.uuid("message_id", v)
		if why == "" {
			if s, ok := text(v); !ok || uuid.UUID(id).String() != strings.ToLower(string(s)) {
				t.Fatalf("message_id %#v read as %s", v, uuid.UUID(id))
			}
		}
		check("message_id", why, why == "")

		why = ""
		p := r.json("payload", v, false)
		check("payload", why, why == "" && json.Valid(p))
		why = ""
		h := r.json("headers", v, true)
		check("headers", why, why == "" && (v == nil || json.Valid(h)))

		why = ""
		a := r.integer("attempts", v, -1<<31, 1<<31-1)
		if why == "" && a != v.(int64) {
			t.Fatalf("attempts %#v read as %d", v, a)
		}
		check("attempts", why, why == "")

		why = ""
		at := r.time("created_at", v)
		if why == "" && (at.UnixMicro() != v.(int64) || at.Year() < 1 || at.Year() > 9999) {
			t.Fatalf("created_at %#v read as %v", v, at)
		}
		check("created_at", why, why == "")
	})
}
