package clienttest_test

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/xadm/mensageria/driver"
)

// TestLeaseFencingProperty races relays over one row with random lease
// lengths, pauses and outcomes, and checks the fencing rule against a
// model: a settle changes the row only when it comes from the row's latest
// claim and that claim's lease has not run out; every other settle is
// refused and leaves the row as the rightful owner left it.
func TestLeaseFencingProperty(t *testing.T) {
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		b := sqliteBackend(t)
		d := b.open()
		own(rt, d, "fencing", "t")
		if err := d.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: [16]byte{9}, Type: "t", Key: "k", Payload: []byte(`{}`)}}}); err != nil {
			rt.Fatal(err)
		}
		// The lease ends between until and latest: the database stamps it
		// somewhere during the Claim call (SQLite's clock is this host's).
		type claim struct {
			token         int64
			until, latest time.Time
		}
		var claims []claim
		settled := false
		for step := 0; step < rapid.IntRange(2, 8).Draw(rt, "steps") && !settled; step++ {
			if rapid.Bool().Draw(rt, "claim") {
				lease := time.Duration(rapid.IntRange(20, 80).Draw(rt, "leaseMs")) * time.Millisecond
				tok := int64(len(claims) + 1)
				before := time.Now()
				jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{"t"}, Limit: 1, Lease: lease, Token: tok})
				if err != nil {
					rt.Fatal(err)
				}
				if len(jobs) == 1 {
					if n := len(claims); n > 0 && time.Now().Before(claims[n-1].until.Add(-5*time.Millisecond)) {
						rt.Fatalf("row claimed again while lease %d was live", claims[n-1].token)
					}
					claims = append(claims, claim{token: tok, until: before.Add(lease), latest: time.Now().Add(lease)})
				}
			} else if len(claims) > 0 {
				i := rapid.IntRange(0, len(claims)-1).Draw(rt, "settler")
				c := claims[i]
				issued := time.Now()
				res, err := d.Settle(ctx, driver.SettleParams{Token: c.token, Dead: []driver.Failure{{ID: 1, Error: "x"}}})
				n := len(res.Settled)
				if err != nil {
					rt.Fatal(err)
				}
				latest := i == len(claims)-1
				// A refused settle says why: a stale claim's row belongs
				// to a later claim (fenced); the latest claim's own lease
				// ran out (expired).
				switch {
				case n+len(res.Fenced)+len(res.Expired) != 1:
					rt.Fatalf("settle of one row sorted it into %+v", res)
				case n == 0 && !latest && len(res.Fenced) != 1:
					rt.Fatalf("a stale claim's refused settle was reported %+v, want fenced", res)
				case n == 0 && latest && len(res.Expired) != 1:
					rt.Fatalf("the latest claim's refused settle was reported %+v, want expired", res)
				}
				switch {
				case n == 1 && !latest:
					rt.Fatalf("a stale claim (token %d of %d) settled the row", c.token, len(claims))
				case n == 1 && issued.After(c.latest):
					rt.Fatalf("claim %d settled after its lease ended", c.token)
				case n == 0 && latest && time.Now().Before(c.until.Add(-5*time.Millisecond)):
					rt.Fatalf("the rightful owner (token %d) was refused inside its lease", c.token)
				}
				settled = n == 1
			}
			time.Sleep(time.Duration(rapid.IntRange(0, 60).Draw(rt, "pauseMs")) * time.Millisecond)
		}
		rows, err := d.ListMessages(ctx, driver.ListFilter{})
		if err != nil || len(rows) != 1 {
			rt.Fatalf("rows: %v %v", rows, err)
		}
		if settled != (rows[0].State == driver.StateDead) {
			rt.Fatalf("model says settled=%v, row is %s", settled, rows[0].State)
		}
	})
}
