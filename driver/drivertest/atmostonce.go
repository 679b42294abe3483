package drivertest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

// amo returns the backend's at-most-once capability; a backend without it
// skips these tests (the relay refuses at-most-once routes on it).
func amo(t *testing.T, d driver.Driver) driver.AtMostOnce {
	t.Helper()
	a, ok := d.(driver.AtMostOnce)
	if !ok {
		t.Skipf("%T does not implement driver.AtMostOnce", d)
	}
	return a
}

func markRows(t *testing.T, d driver.Driver, token int64, ids ...int64) []int64 {
	t.Helper()
	got, err := amo(t, d).Mark(ctxOf(t), driver.MarkParams{Token: token, IDs: ids})
	if err != nil {
		t.Fatalf("Mark(%v): %v", ids, err)
	}
	slices.Sort(got)
	return got
}

func claimInDoubt(t *testing.T, d driver.Driver, c claimer) ([]driver.Job, int64) {
	t.Helper()
	if c.limit == 0 {
		c.limit = 100
	}
	if c.lease == 0 {
		c.lease = longLease
	}
	token := time.Now().UnixNano()
	jobs, err := amo(t, d).ClaimInDoubt(ctxOf(t), driver.InDoubtClaimParams{Types: c.types, Limit: c.limit, Lease: c.lease, Token: token, Fence: c.fence})
	if err != nil {
		t.Fatalf("ClaimInDoubt(%v): %v", c.types, err)
	}
	return jobs, token
}

func listState(t *testing.T, d driver.Driver, st driver.State) []int64 {
	t.Helper()
	return ids(list(t, d, driver.ListFilter{State: st, Types: []string{"m"}}))
}

// inDoubt brings one fresh row to doubt the way a relay that died after
// its mark leaves it: claimed, marked, lease run out.
func inDoubt(t *testing.T, d driver.Driver) int64 {
	t.Helper()
	id := insertOne(t, d, "m", "k-"+time.Now().Format("150405.000000000"))
	jobs, tok := claimWith(t, d, claimer{types: []string{"m"}, lease: shortLease})
	wantIDs(t, "claim", jobs, id)
	if got := markRows(t, d, tok, id); !slices.Equal(got, []int64{id}) {
		t.Fatalf("marked %v, want [%d]", got, id)
	}
	time.Sleep(shortLease + 100*time.Millisecond)
	return id
}

func (s *suite) atMostOnceTests() []test {
	return []test{
		{"MarkNeedsTheLiveLease", func(t *testing.T, h *Harness) {
			d := h.Driver
			a, b := insertOne(t, d, "m", "a"), insertOne(t, d, "m", "b")
			jobs, tok := claimWith(t, d, claimer{types: []string{"m"}, limit: 1})
			wantIDs(t, "claim", jobs, a)
			if got := markRows(t, d, tok+1, a); len(got) != 0 {
				t.Fatalf("a wrong token marked %v", got)
			}
			if got := markRows(t, d, tok, a, b); !slices.Equal(got, []int64{a}) {
				t.Fatalf("marked %v, want only the row leased to the token [%d] (b is not leased)", got, a)
			}
			if got := markRows(t, d, tok, a); len(got) != 0 {
				t.Fatalf("a row marked twice: the second mark returned %v", got)
			}
			j, _ := byID(t, d, a)
			if j.AttemptedAt == nil {
				t.Fatalf("a marked row has no AttemptedAt: %+v", j)
			}
			near(t, "AttemptedAt", *j.AttemptedAt)
			if jb, _ := byID(t, d, b); jb.AttemptedAt != nil {
				t.Fatalf("an unmarked row has AttemptedAt %v", jb.AttemptedAt)
			}
			// Expired lease: nothing is marked.
			jobs, tok2 := claimWith(t, d, claimer{types: []string{"m"}, lease: shortLease})
			wantIDs(t, "claim b", jobs, b)
			time.Sleep(shortLease + 100*time.Millisecond)
			if got := markRows(t, d, tok2, b); len(got) != 0 {
				t.Fatalf("a row whose lease ran out was marked: %v", got)
			}
		}},
		{"MarkedIsNeverClaimedAgain", func(t *testing.T, h *Harness) {
			d := h.Driver
			id := inDoubt(t, d)
			for _, dd := range []driver.Driver{d, reopen(t, h)} {
				if jobs, _ := claim(t, dd, "m"); len(jobs) != 0 {
					t.Fatalf("a row in doubt was claimed again: %v", ids(jobs))
				}
			}
			st := stats(t, d, "m")
			if st.InDoubt != 1 || st.Pending != 0 || st.InFlight != 0 || st.OldestInDoubt <= 0 {
				t.Fatalf("stats of one row in doubt: %+v, want InDoubt 1 with an age, nothing pending or in flight", st)
			}
			if got := listState(t, d, driver.StateInDoubt); !slices.Equal(got, []int64{id}) {
				t.Fatalf("listed in doubt: %v, want [%d]", got, id)
			}
			if got := listState(t, d, driver.StatePending); len(got) != 0 {
				t.Fatalf("a row in doubt is listed as pending: %v", got)
			}
			if j, _ := byID(t, d, id); j.State != driver.StateInDoubt {
				t.Fatalf("a row in doubt is listed with state %q", j.State)
			}
		}},
		{"MarkedInFlightIsNotInDoubt", func(t *testing.T, h *Harness) {
			d := h.Driver
			id := insertOne(t, d, "m", "k")
			_, tok := claim(t, d, "m")
			markRows(t, d, tok, id)
			if st := stats(t, d, "m"); st.InFlight != 1 || st.InDoubt != 0 {
				t.Fatalf("stats of a marked row under its live lease: %+v, want in flight 1, in doubt 0", st)
			}
			if j, _ := byID(t, d, id); j.State != driver.StatePending {
				t.Fatalf("a marked row being sent is listed as %q, want pending", j.State)
			}
		}},
		{"DefiniteOutcomesSettleAsToday", func(t *testing.T, h *Harness) {
			d := h.Driver
			var rows []int64
			for _, k := range []string{"deliv", "retry", "dead", "rel"} {
				rows = append(rows, insertOne(t, d, "m", k))
			}
			jobs, tok := claim(t, d, "m")
			wantIDs(t, "claim", jobs, rows...)
			if got := markRows(t, d, tok, rows...); len(got) != 4 {
				t.Fatalf("marked %v", got)
			}
			res := settleResult(t, d, driver.SettleParams{Token: tok, Delivered: rows[:1],
				Retry: []driver.Retry{{ID: rows[1], Delay: 0, Error: "connection refused (not sent)"}},
				Dead:  []driver.Failure{{ID: rows[2], Error: "400"}}, Release: rows[3:]})
			if len(res.Settled) != 4 {
				t.Fatalf("settle of marked rows: %+v, want all 4 settled", res)
			}
			if _, ok := byID(t, d, rows[0]); ok {
				t.Fatal("a delivered marked row is still there")
			}
			if j, _ := byID(t, d, rows[2]); j.State != driver.StateDead {
				t.Fatalf("a dead marked row: %+v", j)
			}
			for _, id := range rows[1:2] {
				if j, _ := byID(t, d, id); j.State != driver.StatePending || j.AttemptedAt != nil {
					t.Fatalf("a retried marked row keeps its mark or state: %+v", j)
				}
			}
			jobs, _ = claimEventually(t, d, claimer{types: []string{"m"}}, time.Now(), 0)
			got := ids(jobs)
			if !slices.Equal(got, []int64{rows[1], rows[3]}) {
				t.Fatalf("claimed again %v, want the retried and the released rows %v", got, []int64{rows[1], rows[3]})
			}
			for _, j := range jobs {
				want := 2
				if j.ID == rows[3] {
					want = 1 // a release is not an attempt
				}
				if j.Attempt != want {
					t.Fatalf("row %d claimed again with attempt %d, want %d", j.ID, j.Attempt, want)
				}
			}
		}},
		{"InDoubtSettle", func(t *testing.T, h *Harness) {
			d := h.Driver
			id := insertOne(t, d, "m", "k")
			_, tok := claim(t, d, "m")
			markRows(t, d, tok, id)
			res := settleResult(t, d, driver.SettleParams{Token: tok, InDoubt: []driver.Doubt{{ID: id, Error: "timeout after the request was written", Route: "app → legacy"}}})
			if !slices.Equal(res.Settled, []int64{id}) {
				t.Fatalf("in-doubt settle: %+v", res)
			}
			j, _ := byID(t, d, id)
			if j.State != driver.StateInDoubt || j.LastError != "timeout after the request was written" || j.LastRoute != "app → legacy" || j.AttemptedAt == nil {
				t.Fatalf("after an in-doubt settle: %+v", j)
			}
			if jobs, _ := claim(t, d, "m"); len(jobs) != 0 {
				t.Fatal("a row left in doubt was claimed")
			}
			// An unmarked row left in doubt gets its mark then.
			id2 := insertOne(t, d, "m", "k2")
			_, tok = claim(t, d, "m")
			settleResult(t, d, driver.SettleParams{Token: tok, InDoubt: []driver.Doubt{{ID: id2, Error: "x"}}})
			if j, _ := byID(t, d, id2); j.State != driver.StateInDoubt || j.AttemptedAt == nil {
				t.Fatalf("an unmarked row left in doubt: %+v", j)
			}
			// And the wrong token leaves nothing in doubt.
			id3 := insertOne(t, d, "m", "k3")
			_, tok = claim(t, d, "m")
			if res := settleResult(t, d, driver.SettleParams{Token: tok + 1, InDoubt: []driver.Doubt{{ID: id3, Error: "x"}}}); len(res.Settled) != 0 {
				t.Fatalf("a wrong token left a row in doubt: %+v", res)
			}
		}},
		{"LeaseLostWhileMarked", func(t *testing.T, h *Harness) {
			// The relay marked, sent, and its lease ran out before its
			// settle (paused, cut off, deposed): whatever it learned is no
			// longer its to record, and the row is in doubt, never sent
			// again by a claim. A probe by another relay takes it; the old
			// relay's settle is then fenced.
			d := h.Driver
			id := insertOne(t, d, "m", "k")
			jobs, tok := claimWith(t, d, claimer{types: []string{"m"}, lease: shortLease})
			wantIDs(t, "claim", jobs, id)
			markRows(t, d, tok, id)
			time.Sleep(shortLease + 100*time.Millisecond)
			res := settleResult(t, d, driver.SettleParams{Token: tok, Delivered: []int64{id}})
			if !slices.Equal(res.Expired, []int64{id}) {
				t.Fatalf("settle after the lease ran out: %+v, want it expired", res)
			}
			other := reopen(t, h)
			if jobs, _ := claim(t, other, "m"); len(jobs) != 0 {
				t.Fatal("a marked row whose lease ran out was claimed again")
			}
			if st := stats(t, d, "m"); st.InDoubt != 1 {
				t.Fatalf("stats: %+v, want it in doubt", st)
			}
			probed, ptok := claimInDoubt(t, other, claimer{types: []string{"m"}})
			wantIDs(t, "probe claim", probed, id)
			if probed[0].Attempt != 1 || probed[0].AttemptedAt == nil || probed[0].State != driver.StateInDoubt {
				t.Fatalf("probe claim: %+v, want attempt 1 (not counted), its mark, in doubt", probed[0])
			}
			res = settleResult(t, d, driver.SettleParams{Token: tok, Delivered: []int64{id}, InDoubt: []driver.Doubt{{ID: id, Error: "x"}}})
			if !slices.Equal(res.Fenced, []int64{id}) {
				t.Fatalf("the old relay's settle while a probe holds the row: %+v, want fenced", res)
			}
			if res := settleResult(t, other, driver.SettleParams{Token: ptok, Delivered: []int64{id}}); !slices.Equal(res.Settled, []int64{id}) {
				t.Fatalf("the probe's settle: %+v", res)
			}
			if st := stats(t, d, "m"); st.InDoubt != 0 || st.DeliveredLastHr != 1 {
				t.Fatalf("stats after the probe: %+v", st)
			}
		}},
		{"ClaimInDoubtTakesOnlyRowsInDoubt", func(t *testing.T, h *Harness) {
			d := h.Driver
			doubt := inDoubt(t, d)
			plain := insertOne(t, d, "m", "plain")
			live := insertOne(t, d, "m", "live")
			jobs, tok := claimWith(t, d, claimer{types: []string{"m"}})
			wantIDs(t, "claim", jobs, plain, live)
			markRows(t, d, tok, live)
			settle(t, d, driver.SettleParams{Token: tok, Release: []int64{plain}})
			if jobs, _ := claimInDoubt(t, d, claimer{types: []string{"other"}}); len(jobs) != 0 {
				t.Fatalf("probe claim of another type took %v", ids(jobs))
			}
			probed, ptok := claimInDoubt(t, d, claimer{types: []string{"m"}})
			wantIDs(t, "probe claim: the row in doubt, not the plain one nor the one being sent", probed, doubt)
			if again, _ := claimInDoubt(t, d, claimer{types: []string{"m"}}); len(again) != 0 {
				t.Fatalf("a row under a probe's lease was taken by another probe: %v", ids(again))
			}
			// No answer: in doubt again, and not probed before its time.
			delay := 400 * time.Millisecond
			start := time.Now()
			settle(t, d, driver.SettleParams{Token: ptok, InDoubt: []driver.Doubt{{ID: doubt, Error: "probe: no answer", ProbeAfter: delay}}})
			if j, _ := byID(t, d, doubt); j.State != driver.StateInDoubt || j.LastError != "probe: no answer" {
				t.Fatalf("after a probe without an answer: %+v", j)
			}
			var again []driver.Job
			eventually(t, "the next probe claim", func() bool {
				again, ptok = claimInDoubt(t, d, claimer{types: []string{"m"}})
				if len(again) > 0 && early(start, delay-5*time.Millisecond) {
					t.Fatalf("probed again %s after a probe that asked for %s", time.Since(start), delay)
				}
				return len(again) > 0
			})
			wantIDs(t, "probe claim after the delay", again, doubt)
			// Not applied: one more attempt, counted when claimed.
			settle(t, d, driver.SettleParams{Token: ptok, Retry: []driver.Retry{{ID: doubt, Error: "probe: not applied"}}})
			jobs, _ = claimEventually(t, d, claimer{types: []string{"m"}}, time.Now(), 0)
			if !slices.Contains(ids(jobs), doubt) {
				t.Fatalf("a row the probe found not applied was not claimed again: %v", ids(jobs))
			}
			for _, j := range jobs {
				if j.ID == doubt && (j.Attempt != 2 || j.AttemptedAt != nil) {
					t.Fatalf("the retried row: %+v, want attempt 2 and no mark", j)
				}
			}
		}},
		{"ClaimInDoubtIsFenced", func(t *testing.T, h *Harness) {
			d := h.Driver
			e := elector(t, d, "app-f", longLease)
			epoch, ok := acquire(t, e)
			if !ok {
				t.Fatal("not leader")
			}
			inDoubt(t, d)
			if jobs, _ := claimInDoubt(t, d, claimer{types: []string{"m"}, fence: &driver.Fence{App: "app-f", Epoch: epoch - 1}}); len(jobs) != 0 {
				t.Fatalf("a deposed epoch's probe claim took %v", ids(jobs))
			}
			if jobs, _ := claimInDoubt(t, d, claimer{types: []string{"m"}, fence: &driver.Fence{App: "app-f", Epoch: epoch}}); len(jobs) != 1 {
				t.Fatalf("the leader's probe claim took %v, want 1", ids(jobs))
			}
		}},
		{"InDoubtBlocksItsKey", func(t *testing.T, h *Harness) {
			d := h.Driver
			a := insertOne(t, d, "m", "k")
			b := insertOne(t, d, "m", "k")
			jobs, tok := claimWith(t, d, claimer{types: []string{"m"}, ordered: []string{"m"}})
			wantIDs(t, "ordered claim", jobs, a)
			markRows(t, d, tok, a)
			settle(t, d, driver.SettleParams{Token: tok, InDoubt: []driver.Doubt{{ID: a, Error: "timeout"}}})
			if jobs, _ := claimWith(t, d, claimer{types: []string{"m"}, ordered: []string{"m"}}); len(jobs) != 0 {
				t.Fatalf("the key's next row %d was claimed while the one before it is in doubt: %v", b, ids(jobs))
			}
		}},
		{"Resolve", func(t *testing.T, h *Harness) {
			d := h.Driver
			a := amo(t, d)
			deliv, retry, dead := inDoubt(t, d), inDoubt(t, d), inDoubt(t, d)
			plain := insertOne(t, d, "m", "plain")
			ctx := ctxOf(t)
			for _, bad := range []driver.ResolveParams{
				{Outcome: driver.ResolveDelivered, By: "ana", Reason: "checked"},
				{IDs: []int64{deliv}, Outcome: "maybe", By: "ana", Reason: "checked"},
				{IDs: []int64{deliv}, Outcome: driver.ResolveDelivered, Reason: "checked"},
				{IDs: []int64{deliv}, Outcome: driver.ResolveDelivered, By: "ana", Reason: "  "},
			} {
				if _, err := a.Resolve(ctx, bad); !errors.Is(err, driver.ErrInvalidResolve) {
					t.Fatalf("Resolve(%+v) = %v, want ErrInvalidResolve", bad, err)
				}
			}
			if st := stats(t, d, "m"); st.InDoubt != 3 {
				t.Fatalf("a refused resolution changed something: %+v", st)
			}
			res, err := a.Resolve(ctx, driver.ResolveParams{IDs: []int64{deliv, plain, deliv}, Outcome: driver.ResolveDelivered, By: "ana", Reason: "the legacy API shows order 1"})
			if err != nil || !slices.Equal(res.Resolved, []int64{deliv}) || !slices.Equal(res.NotInDoubt, []int64{plain}) {
				t.Fatalf("Resolve delivered = %+v, %v", res, err)
			}
			if _, ok := byID(t, d, deliv); ok {
				t.Fatal("a row resolved delivered is still there")
			}
			if j, _ := byID(t, d, plain); j.State != driver.StatePending || j.AttemptedAt != nil {
				t.Fatalf("a row not in doubt was changed by Resolve: %+v", j)
			}
			if _, err := a.Resolve(ctx, driver.ResolveParams{IDs: []int64{retry}, Outcome: driver.ResolveRetry, By: "ana", Reason: "not in the legacy API"}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Resolve(ctx, driver.ResolveParams{IDs: []int64{dead}, Outcome: driver.ResolveDead, By: "bia", Reason: "cancelled by the customer"}); err != nil {
				t.Fatal(err)
			}
			if j, _ := byID(t, d, dead); j.State != driver.StateDead {
				t.Fatalf("a row resolved dead: %+v", j)
			}
			jobs, _ := claim(t, d, "m")
			if got := ids(jobs); !slices.Equal(got, sorted([]int64{retry, plain})) {
				t.Fatalf("claimed after resolutions %v, want the retried row and the plain one", got)
			}
			st := stats(t, d, "m")
			if st.InDoubt != 0 || st.DeliveredLastHr != 1 || st.Dead != 1 {
				t.Fatalf("stats after resolutions: %+v", st)
			}
			recs, err := a.Resolutions(ctx, nil, 0)
			if err != nil || len(recs) != 3 {
				t.Fatalf("Resolutions = %+v, %v; want 3", recs, err)
			}
			if recs[0].OutboxID != dead || recs[0].Outcome != driver.ResolveDead || recs[0].By != "bia" || recs[0].Reason != "cancelled by the customer" || recs[0].Type != "m" {
				t.Fatalf("newest resolution: %+v", recs[0])
			}
			near(t, "resolution time", recs[0].At)
			if recs[2].OutboxID != deliv || recs[2].Outcome != driver.ResolveDelivered || recs[2].MessageID == ([16]byte{}) {
				t.Fatalf("oldest resolution: %+v", recs[2])
			}
			one, err := a.Resolutions(ctx, [][16]byte{recs[1].MessageID}, 10)
			if err != nil || len(one) != 1 || one[0].OutboxID != retry {
				t.Fatalf("Resolutions of one message = %+v, %v", one, err)
			}
			// A row being probed is not in doubt for an operator.
			probing := inDoubt(t, d)
			claimInDoubt(t, d, claimer{types: []string{"m"}})
			if res, _ := a.Resolve(ctx, driver.ResolveParams{IDs: []int64{probing}, Outcome: driver.ResolveDead, By: "ana", Reason: "x y z"}); len(res.Resolved) != 0 {
				t.Fatalf("a row under a probe's lease was resolved: %+v", res)
			}
		}},
	}
}

func (s *suite) atMostOnceQuietTests() []test {
	return []test{
		{"ClaimInDoubtWaitsForQuiet", func(t *testing.T, h *Harness) {
			// A relay that died after sending left its request on the way:
			// the probe waits Quiet past the lease's end before asking.
			d := h.Driver
			id := insertOne(t, d, "m", "k")
			start := time.Now()
			jobs, tok := claimWith(t, d, claimer{types: []string{"m"}, lease: shortLease})
			wantIDs(t, "claim", jobs, id)
			markRows(t, d, tok, id)
			quiet := 400 * time.Millisecond
			probe := func() []driver.Job {
				jobs, err := amo(t, d).ClaimInDoubt(ctxOf(t), driver.InDoubtClaimParams{Types: []string{"m"}, Limit: 10, Lease: longLease, Token: tok + 1, Quiet: quiet})
				if err != nil {
					t.Fatal(err)
				}
				return jobs
			}
			var got []driver.Job
			eventually(t, "the probe claim after the quiet period", func() bool {
				got = probe()
				if len(got) > 0 && early(start, shortLease+quiet-5*time.Millisecond) {
					t.Fatalf("probed %s after the claim, before lease %s + quiet %s", time.Since(start), shortLease, quiet)
				}
				return len(got) > 0
			})
			wantIDs(t, "probe claim", got, id)
		}},
	}
}
