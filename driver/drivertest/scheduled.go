package drivertest

import (
	"slices"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

// scheduledRow is a row of typ and key that is not due before notBefore.
func scheduledRow(t *testing.T, typ, key string, notBefore time.Time) driver.InsertRow {
	r := row(t, typ, key)
	r.NotBefore = notBefore
	return r
}

// insertScheduled inserts one row due at notBefore and returns its id.
func insertScheduled(t *testing.T, d driver.Driver, typ, key string, notBefore time.Time) int64 {
	t.Helper()
	r := scheduledRow(t, typ, key, notBefore)
	insert(t, d, r)
	return byMessageID(t, d, r.MessageID).ID
}

// inAbout returns the instant d from now, rounded to the microsecond as
// the client rounds a NotBefore.
func inAbout(d time.Duration) time.Time { return time.Now().Add(d).Truncate(time.Microsecond) }

func (s *suite) scheduledTests() []test {
	return []test{
		{"NotClaimedBeforeDue", func(t *testing.T, h *Harness) {
			d := h.Driver
			// One scheduled row among more plain ones than one statement
			// of any backend holds: the rows keep their order and only the
			// scheduled one waits.
			later := inAbout(time.Hour)
			rows := make([]driver.InsertRow, 0, 1201)
			for i := range 1200 {
				rows = append(rows, row(t, "a", "k"+string(rune('a'+i%26))))
			}
			rows = append(rows, scheduledRow(t, "a", "later", later))
			insert(t, d, rows...)
			jobs, _ := claimWith(t, d, claimer{types: []string{"a"}, limit: 2000})
			if len(jobs) != 1200 {
				t.Fatalf("claimed %d rows, want the 1200 due ones", len(jobs))
			}
			for _, j := range jobs {
				if j.Key == "later" {
					t.Fatalf("the row scheduled an hour ahead was claimed: %+v", j)
				}
			}
			// Listed after every claimed row: inserted after them, in order.
			rest := list(t, d, driver.ListFilter{AfterID: slices.Max(ids(jobs))})
			if len(rest) != 1 || rest[0].MessageID != rows[1200].MessageID {
				t.Fatalf("rows after the claimed ones: %+v, want the scheduled row alone", rest)
			}
			if j := rest[0]; j.State != driver.StatePending || j.Attempt != 0 || !j.AvailableAt.Equal(later) {
				t.Fatalf("scheduled row: state %q attempt %d available %s, want pending, 0, %s", j.State, j.Attempt, j.AvailableAt, later)
			}
		}},
		{"ClaimedOnceDue", func(t *testing.T, h *Harness) {
			d := h.Driver
			start := time.Now()
			delay := 400 * time.Millisecond
			id := insertScheduled(t, d, "a", "1", start.Add(delay).Truncate(time.Microsecond))
			jobs, _ := claimNotYet(t, d, claimer{types: []string{"a"}}, start, delay, "a scheduled row")
			wantIDs(t, "once due", jobs, id)
			if jobs[0].Attempt != 1 {
				t.Fatalf("first claim of a scheduled row: attempt %d, want 1", jobs[0].Attempt)
			}
		}},
		{"InsertTxScheduled", func(t *testing.T, h *Harness) {
			d := h.Driver
			own(t, d, "a")
			later, start := inAbout(time.Hour), time.Now()
			soon := start.Add(300 * time.Millisecond).Truncate(time.Microsecond)
			tx, commit, rollback, err := h.Begin(ctxOf(t))
			if err != nil {
				t.Fatal(err)
			}
			rows := []driver.InsertRow{scheduledRow(t, "a", "later", later), row(t, "a", "now"), scheduledRow(t, "a", "soon", soon)}
			if err := d.InsertTx(ctxOf(t), tx, driver.InsertParams{Rows: rows}); err != nil {
				_ = rollback()
				t.Fatalf("InsertTx: %v", err)
			}
			if err := commit(); err != nil {
				t.Fatal(err)
			}
			keys := func(jobs []driver.Job) (out []string) {
				for _, j := range jobs {
					out = append(out, j.Key)
				}
				slices.Sort(out)
				return out
			}
			jobs, _ := claim(t, d, "a")
			switch got := keys(jobs); {
			case slices.Equal(got, []string{"now", "soon"}) && !early(start, 300*time.Millisecond):
				// A slow machine: the soon row was due by the claim.
			case slices.Equal(got, []string{"now"}):
				jobs, _ = claimNotYet(t, d, claimer{types: []string{"a"}}, start, 300*time.Millisecond, "a row scheduled in a transaction")
				if got := keys(jobs); !slices.Equal(got, []string{"soon"}) {
					t.Fatalf("claimed %v, want the row due in 300ms", got)
				}
			default:
				t.Fatalf("claimed %v %s after the insert, want the row without a NotBefore alone", got, time.Since(start))
			}
			if j := byMessageID(t, d, rows[0].MessageID); !j.AvailableAt.Equal(later) {
				t.Fatalf("available_at = %s, want %s", j.AvailableAt, later)
			}
		}},
		{"PastIsNow", func(t *testing.T, h *Harness) {
			d := h.Driver
			// A first claim, so that a backend that claims from a floor has
			// one (PostgreSQL's is the last claim's time less a second):
			// a row stored with its past NotBefore would be below it and
			// wait for a sweep.
			first := insertOne(t, d, "a", "1")
			jobs, _ := claim(t, d, "a")
			wantIDs(t, "first", jobs, first)
			past := time.Date(2000, 1, 2, 3, 4, 5, 6000, time.UTC)
			id := insertScheduled(t, d, "a", "2", past)
			jobs, _ = claim(t, d, "a")
			wantIDs(t, "a row whose NotBefore is long past", jobs, id)
			j, _ := byID(t, d, id)
			near(t, "AvailableAt of a row scheduled in the past", j.AvailableAt)
		}},
		{"StatsScheduledApartFromPending", func(t *testing.T, h *Harness) {
			d := h.Driver
			later := inAbout(time.Hour)
			insertScheduled(t, d, "s", "only", later)
			if st := stats(t, d, "s"); st.Scheduled != 1 || st.Pending != 0 || st.InFlight != 0 || st.OldestPending != 0 {
				t.Fatalf("a type with one scheduled row: %+v, want scheduled 1, pending 0, oldest pending 0", st)
			}
			// Rows waiting for a retry's backoff are as far in the future,
			// and counted pending as before: a retry records its error,
			// "" included, and an uncounted one leaves the attempts at 0.
			insertScheduled(t, d, "a", "sched", later)
			plain := insertOne(t, d, "a", "plain")
			r1, r2 := insertOne(t, d, "a", "retry"), insertOne(t, d, "a", "outage")
			jobs, tok := claim(t, d, "a")
			wantIDs(t, "due rows", jobs, plain, r1, r2)
			settle(t, d, driver.SettleParams{Token: tok, Release: []int64{plain}, Retry: []driver.Retry{
				{ID: r1, Delay: time.Hour, Error: "down"},
				{ID: r2, Delay: time.Hour, Error: "", Uncounted: true},
			}})
			if j, _ := byID(t, d, r2); j.Attempt != 0 {
				t.Fatalf("uncounted retry: attempt %d, want 0", j.Attempt)
			}
			st := stats(t, d, "a")
			if st.Scheduled != 1 || st.Pending != 3 || st.InFlight != 0 {
				t.Fatalf("stats %+v, want scheduled 1 (the NotBefore row), pending 3 (released, retry, uncounted retry)", st)
			}
			// Listed, a scheduled row is pending, due at its NotBefore.
			pending := list(t, d, driver.ListFilter{State: driver.StatePending, Types: []string{"a"}})
			if len(pending) != 4 {
				t.Fatalf("listed %d pending rows, want 4", len(pending))
			}
		}},
		{"NextDue", func(t *testing.T, h *Harness) {
			d := h.Driver
			dr, ok := d.(driver.DueReporter)
			if !ok {
				t.Skip("the driver does not implement driver.DueReporter; its relays poll")
			}
			next := func(types ...string) (time.Duration, bool) {
				t.Helper()
				w, ok, err := dr.NextDue(ctxOf(t), types)
				if err != nil {
					t.Fatalf("NextDue(%v): %v", types, err)
				}
				return w, ok
			}
			if w, ok := next(); ok {
				t.Fatalf("NextDue of no types = %s, true", w)
			}
			insertOne(t, d, "a", "due")
			if w, ok := next("a"); ok {
				t.Fatalf("NextDue with only a due row = %s, true; want none", w)
			}
			insertScheduled(t, d, "b", "other", inAbout(time.Minute))
			insertScheduled(t, d, "a", "hour", inAbout(time.Hour))
			// The bounds leave the inserts and the query time to run on a
			// loaded machine.
			if w, ok := next("a"); !ok || w <= 50*time.Minute || w > time.Hour {
				t.Fatalf("NextDue(a) = %s, %v; want about an hour", w, ok)
			}
			if w, ok := next("a", "b", "zzz"); !ok || w <= 30*time.Second || w > time.Minute {
				t.Fatalf("NextDue(a, b) = %s, %v; want about a minute", w, ok)
			}
			// A retry's backoff comes due too; a leased row does not (its
			// lease, not its available_at, ends it).
			r := insertOne(t, d, "c", "retry")
			insertOne(t, d, "c", "leased")
			jobs, tok := claim(t, d, "c")
			if len(jobs) != 2 {
				t.Fatalf("claimed %d rows of c, want 2", len(jobs))
			}
			if w, ok := next("c"); ok {
				t.Fatalf("NextDue with only leased rows = %s, true; want none", w)
			}
			settle(t, d, driver.SettleParams{Token: tok, Retry: []driver.Retry{{ID: r, Delay: 10 * time.Minute, Error: "down"}}})
			if w, ok := next("c"); !ok || w <= 5*time.Minute || w > 10*time.Minute {
				t.Fatalf("NextDue after a 10m retry = %s, %v; want about 10m", w, ok)
			}
		}},
		{"OrderedScheduledHeadHoldsItsKey", func(t *testing.T, h *Harness) {
			d := h.Driver
			ord := claimer{types: []string{"o"}, ordered: []string{"o"}}
			// k1's head is due in an hour: the key's later row, due now,
			// waits behind it; k2 flows.
			insertScheduled(t, d, "o", "k1", inAbout(time.Hour))
			insertOne(t, d, "o", "k1")
			n1 := insertOne(t, d, "o", "k2")
			// Unordered: each row on its own time.
			insertScheduled(t, d, "u", "k1", inAbout(time.Hour))
			u2 := insertOne(t, d, "u", "k1")
			jobs, _ := claim(t, d, "u")
			wantIDs(t, "unordered: the due row goes before the earlier scheduled one", jobs, u2)
			jobs, tok := claimWith(t, d, ord)
			wantIDs(t, "ordered: k1 waits behind its scheduled head, k2 flows", jobs, n1)
			settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{n1}})
			// k3's head comes due soon: it goes first, then the row behind
			// it once it is settled, however late the claim comes.
			start := time.Now()
			delay := 400 * time.Millisecond
			m1 := insertScheduled(t, d, "o", "k3", start.Add(delay).Truncate(time.Microsecond))
			m2 := insertOne(t, d, "o", "k3")
			jobs, tok = claimNotYet(t, d, ord, start, delay, "k3 behind its scheduled head")
			wantIDs(t, "the scheduled head, once due, alone", jobs, m1)
			if jobs2, _ := claimWith(t, reopen(t, h), ord); len(jobs2) != 0 {
				t.Fatalf("the next of k3 was claimed while its head is in flight: %v", ids(jobs2))
			}
			settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{m1}})
			jobs, _ = claimWith(t, d, ord)
			wantIDs(t, "then the next of k3", jobs, m2)
		}},
	}
}
