package clienttest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/xadm/mensageria/driver"
)

// TestOrderedClaimProperty drives a driver through random interleavings of
// enqueues, claims and outcomes on an ordered type, and checks the per-key
// order rules against a model: a claim only ever returns the oldest
// unsettled row of its key, never two rows of one key at once, and the
// delivered rows of each key come out in enqueue order (dead ones skipped).
func TestOrderedClaimProperty(t *testing.T) {
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		b := sqliteBackend(t)
		d := b.open()
		own(rt, d, "ordering", "o")
		type row struct {
			id    int64
			key   string
			state string // pending, leased, delivered, dead
			token int64
		}
		var rows []*row
		byID := map[int64]*row{}
		delivered := map[string][]int64{}
		inserted := 0
		token := int64(0)
		keys := []string{"a", "b", "c"}

		steps := rapid.IntRange(5, 40).Draw(rt, "steps")
		for s := 0; s < steps; s++ {
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0, 1: // enqueue
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				inserted++
				if err := d.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: [16]byte{byte(inserted), byte(inserted >> 8), 7}, Type: "o", Key: k, Payload: []byte(fmt.Sprintf(`{"n":%d}`, inserted))}}}); err != nil {
					rt.Fatal(err)
				}
				after := int64(0)
				if len(rows) > 0 {
					after = rows[len(rows)-1].id
				}
				jobs, err := d.ListMessages(ctx, driver.ListFilter{AfterID: after, Limit: 10})
				if err != nil || len(jobs) != 1 {
					rt.Fatalf("list after insert: %v %v", jobs, err)
				}
				r := &row{id: jobs[0].ID, key: k, state: "pending"}
				rows = append(rows, r)
				byID[r.id] = r
			case 2: // claim
				token++
				jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{"o"}, OrderedTypes: []string{"o"}, Limit: 10, Lease: time.Minute, Token: token})
				if err != nil {
					rt.Fatal(err)
				}
				seen := map[string]bool{}
				for _, j := range jobs {
					r := byID[j.ID]
					if seen[r.key] {
						rt.Fatalf("two rows of key %s in one claim", r.key)
					}
					seen[r.key] = true
					for _, o := range rows {
						if o.key == r.key && o.id < r.id && (o.state == "pending" || o.state == "leased") {
							rt.Fatalf("claimed row %d of key %s while older row %d is %s", r.id, r.key, o.id, o.state)
						}
					}
					r.state, r.token = "leased", token
				}
			case 3: // settle one leased row
				var leased []*row
				for _, r := range rows {
					if r.state == "leased" {
						leased = append(leased, r)
					}
				}
				if len(leased) == 0 {
					continue
				}
				r := rapid.SampledFrom(leased).Draw(rt, "settle")
				p := driver.SettleParams{Token: r.token, KeepDelivered: true}
				switch rapid.IntRange(0, 3).Draw(rt, "outcome") {
				case 0, 1:
					p.Delivered = []int64{r.id}
					r.state = "delivered"
					delivered[r.key] = append(delivered[r.key], r.id)
				case 2:
					p.Dead = []driver.Failure{{ID: r.id, Error: "refused"}}
					r.state = "dead"
				case 3:
					p.Release = []int64{r.id}
					r.state = "pending"
				}
				if res, err := d.Settle(ctx, p); err != nil || len(res.Settled) != 1 {
					rt.Fatalf("settle %+v: %+v %v", p, res, err)
				}
			}
		}
		for k, ids := range delivered {
			for i := 1; i < len(ids); i++ {
				if ids[i] < ids[i-1] {
					rt.Fatalf("key %s delivered out of order: %v", k, ids)
				}
			}
		}
	})
}
