package sqlite_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
)

func enqueue(t *testing.T, d *sqlite.Driver, typ string, keys ...string) {
	t.Helper()
	var rows []driver.InsertRow
	for _, k := range keys {
		rows = append(rows, driver.InsertRow{MessageID: uuid.New(), Type: typ, Key: k, Payload: []byte(`{}`)})
	}
	if err := d.Insert(t.Context(), driver.InsertParams{Rows: rows}); err != nil {
		t.Fatalf("Insert: %v", err)
	}
}

func claimT(t *testing.T, d *sqlite.Driver, token int64, types ...string) []int64 {
	t.Helper()
	jobs, err := d.Claim(t.Context(), driver.ClaimParams{Types: types, Limit: 100, Lease: time.Minute, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

func execT(t *testing.T, d *sqlite.Driver, q string, args ...any) {
	t.Helper()
	if _, err := d.DB().Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// Settle tells the rows it changed from the ones another relay took over
// and from the ones whose lease ran out under it. Leases are moved into
// the past by hand, so nothing waits on the clock.
func TestSettleSortsRows(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	own(t, d, "a", "live", "lapsed")
	enqueue(t, d, "live", "1", "2", "3")
	enqueue(t, d, "lapsed", "4", "5", "6")
	const me, other = 11, 22
	live := claimT(t, d, me, "live")
	lapsed := claimT(t, d, me, "lapsed")
	if len(live) != 3 || len(lapsed) != 3 {
		t.Fatalf("claimed %v and %v", live, lapsed)
	}
	// Every lapsed lease ends; another relay claims two of those rows and
	// settles one of them, so it is gone.
	execT(t, d, "UPDATE mensageria_outbox SET lease_until = 1, available_at = 1 WHERE type = 'lapsed'")
	taken := []int64{lapsed[0], lapsed[1]}
	execT(t, d, "UPDATE mensageria_outbox SET available_at = ? WHERE id = ?", time.Now().Add(time.Hour).UnixMicro(), lapsed[2])
	if got := claimT(t, d, other, "lapsed"); !slices.Equal(got, taken) {
		t.Fatalf("other relay claimed %v, want %v", got, taken)
	}
	if res, err := d.Settle(ctx, driver.SettleParams{Token: other, Delivered: []int64{taken[0]}}); err != nil || !slices.Equal(res.Settled, taken[:1]) {
		t.Fatalf("other relay's settle = %+v, %v", res, err)
	}
	const missing = 9999
	res, err := d.Settle(ctx, driver.SettleParams{
		Token:     me,
		Delivered: []int64{live[0], taken[0], missing},
		Retry:     []driver.Retry{{ID: live[1], Delay: time.Hour, Error: "503", Route: "a → http https://b/m2m"}, {ID: taken[1], Error: "x"}},
		Dead:      []driver.Failure{{ID: live[2], Error: "404 from b", Route: "a → http https://b/m2m"}, {ID: lapsed[2], Error: "y"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{live[0], live[1], live[2]}; !slices.Equal(res.Settled, want) {
		t.Fatalf("Settled %v, want %v", res.Settled, want)
	}
	if want := []int64{taken[0], missing, taken[1]}; !slices.Equal(res.Fenced, want) {
		t.Fatalf("Fenced %v, want %v (gone, never there, leased to another token)", res.Fenced, want)
	}
	if want := []int64{lapsed[2]}; !slices.Equal(res.Expired, want) {
		t.Fatalf("Expired %v, want %v", res.Expired, want)
	}
	// The failures say who answered; the untouched rows are as they were.
	jobs, err := d.ListMessages(ctx, driver.ListFilter{IDs: []int64{live[1], live[2], taken[1], lapsed[2]}})
	if err != nil || len(jobs) != 4 {
		t.Fatalf("list = %d rows, %v", len(jobs), err)
	}
	for _, j := range jobs {
		if j.Owner != "a" {
			t.Fatalf("row %d owner %q, want a", j.ID, j.Owner)
		}
		switch j.ID {
		case live[1], live[2]:
			if j.LastRoute != "a → http https://b/m2m" || j.LastError == "" {
				t.Fatalf("failed row %d: route %q error %q", j.ID, j.LastRoute, j.LastError)
			}
		default:
			if j.LastError != "" || j.State != driver.StatePending {
				t.Fatalf("row %d of another lease changed: %+v", j.ID, j)
			}
		}
	}
	// A later failure without a route does not keep the older route.
	execT(t, d, "UPDATE mensageria_outbox SET available_at = 1 WHERE id = ?", live[1])
	if got := claimT(t, d, 33, "live"); !slices.Equal(got, live[1:2]) {
		t.Fatalf("reclaim of the retried row: %v", got)
	}
	if res, err := d.Settle(ctx, driver.SettleParams{Token: 33, Retry: []driver.Retry{{ID: live[1], Error: "timeout"}}}); err != nil || len(res.Settled) != 1 {
		t.Fatalf("retry without a route = %+v, %v", res, err)
	}
	if jobs, err := d.ListMessages(ctx, driver.ListFilter{IDs: live[1:2]}); err != nil || jobs[0].LastRoute != "" || jobs[0].LastError != "timeout" {
		t.Fatalf("row after a routeless retry = %+v, %v", jobs, err)
	}
	// A row listed twice takes its first outcome and is reported once.
	enqueue(t, d, "live", "7")
	twice := claimT(t, d, 44, "live")
	res, err = d.Settle(ctx, driver.SettleParams{Token: 44, Delivered: twice, Dead: []driver.Failure{{ID: twice[0], Error: "z"}}})
	if err != nil || !slices.Equal(res.Settled, twice) || len(res.Fenced)+len(res.Expired) != 0 {
		t.Fatalf("a row in two outcomes = %+v, %v", res, err)
	}
}

// Purge deletes only what the catalog gives the purging app: delivered
// rows of its types, and its consumers' records after each one's window.
// Ages are set by hand, so nothing waits on the clock.
func TestPurgeByOwnerAndWindow(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	if _, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{
		typ("mine"), consumer("short", time.Hour), consumer("long", 48*time.Hour), consumer("forever", 0)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Register(ctx, driver.RegisterParams{App: "b", Resources: []driver.Resource{typ("theirs"), consumer("neighbour", time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, d, "mine", "1", "2")
	enqueue(t, d, "theirs", "1")
	for i, typ := range []string{"mine", "theirs"} {
		ids := claimT(t, d, int64(i+1), typ)
		if _, err := d.Settle(ctx, driver.SettleParams{Token: int64(i + 1), Delivered: ids, KeepDelivered: true}); err != nil {
			t.Fatal(err)
		}
	}
	twoHours := time.Now().Add(-2 * time.Hour).UnixMicro()
	execT(t, d, "UPDATE mensageria_outbox SET delivered_at = ?", twoHours)
	execT(t, d, "INSERT INTO mensageria_delivered_counts (type, minute, n) VALUES ('mine', 60000000, 1), ('theirs', 60000000, 1)")
	ages := map[string]time.Duration{"old": 2 * time.Hour, "recent": 30 * time.Minute}
	for _, c := range []string{"short", "long", "forever", "neighbour", "unowned"} {
		for k, age := range ages {
			execT(t, d, "INSERT INTO mensageria_inbox (consumer, key, message_id, received_at) VALUES (?, ?, ?, ?)",
				c, k, uuid.NewString(), time.Now().Add(-age).UnixMicro())
		}
	}
	inbox := func() []string { return dump(t, d, "inbox", "consumer, key", "consumer, key") }
	purge := func(p driver.PurgeParams) driver.PurgeResult {
		t.Helper()
		r, err := d.Purge(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := purge(driver.PurgeParams{App: "a", Types: []string{"mine"}, DeliveredBefore: time.Hour, Batch: 1}); r.Outbox != 1 || r.Inbox != 1 {
		t.Fatalf("first pass of batch 1 = %+v", r)
	}
	if r := purge(driver.PurgeParams{App: "a", Types: []string{"mine"}, DeliveredBefore: time.Hour}); r.Outbox != 1 || r.Inbox != 0 {
		t.Fatalf("second pass = %+v", r)
	}
	want := []string{"[forever old]", "[forever recent]", "[long old]", "[long recent]", "[neighbour old]", "[neighbour recent]", "[short recent]", "[unowned old]", "[unowned recent]"}
	if got := inbox(); !slices.Equal(got, want) {
		t.Fatalf("inbox after a's purge %v, want %v", got, want)
	}
	if got := dump(t, d, "outbox", "type", "id"); !slices.Equal(got, []string{"[theirs]"}) {
		t.Fatalf("outbox after a's purge %v, want b's delivered row only", got)
	}
	var oldCounts string
	if err := d.DB().QueryRow("SELECT group_concat(type) FROM mensageria_delivered_counts WHERE minute = 60000000").Scan(&oldCounts); err != nil || oldCounts != "theirs" {
		t.Fatalf("day-old counts after a's purge %q (%v), want b's only", oldCounts, err)
	}
	// The owner shortens a window: the one source of it is the catalog.
	if _, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{typ("mine"), consumer("long", time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if r := purge(driver.PurgeParams{App: "a", Types: []string{"mine"}}); r.Inbox != 1 {
		t.Fatalf("purge after the window shrank = %+v, want long's old record", r)
	}
	if r := purge(driver.PurgeParams{App: "b", Types: []string{"theirs"}, DeliveredBefore: time.Hour}); r.Inbox != 1 || r.Outbox != 1 {
		t.Fatalf("b's purge = %+v, want its consumer's old record and its delivered row", r)
	}
	want = []string{"[forever old]", "[forever recent]", "[long recent]", "[neighbour recent]", "[short recent]", "[unowned old]", "[unowned recent]"}
	if got := inbox(); !slices.Equal(got, want) {
		t.Fatalf("inbox at the end %v, want %v", got, want)
	}
	// No app named: nothing of the inbox is anyone's to purge.
	if r := purge(driver.PurgeParams{}); r.Inbox != 0 || r.Outbox != 0 {
		t.Fatalf("purge of no app = %+v", r)
	}
}

// The inbox keeps the payload's digest, so a duplicate can be told from a
// different message under the same key.
func TestInboxPayloadHash(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	first := uuid.New()
	for i, c := range []struct {
		hash      []byte
		duplicate bool
	}{{[]byte{1, 2, 3}, false}, {[]byte{9}, true}} {
		err := d.InTx(t.Context(), func(ctx context.Context, tx driver.Tx) error {
			id := first
			if i > 0 {
				id = uuid.New()
			}
			r, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "c", Key: "k", MessageID: id, PayloadHash: c.hash})
			if err != nil {
				return err
			}
			if r.Duplicate != c.duplicate || (c.duplicate && (string(r.FirstPayloadHash) != "\x01\x02\x03" || r.FirstMessageID != first)) {
				t.Errorf("record %d = %+v", i, r)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Without a hash, none is stored or returned.
	for i := range 2 {
		err := d.InTx(t.Context(), func(ctx context.Context, tx driver.Tx) error {
			r, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "c", Key: "nohash", MessageID: uuid.New()})
			if err == nil && (r.Duplicate != (i == 1) || r.FirstPayloadHash != nil) {
				t.Errorf("record without a hash %d = %+v", i, r)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
