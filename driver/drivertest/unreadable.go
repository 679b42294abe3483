package drivertest

import (
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver"
)

func (s *suite) unreadableTests() []test {
	return []test{
		{"ClaimedAndListedWithTheRest", func(t *testing.T, h *Harness) {
			if h.Unreadable == nil {
				t.Skip("the harness stores no unreadable rows")
			}
			d := h.Driver
			typ := "unreadable.t"
			insert(t, d, row(t, typ, "good-1"))
			stmts, bad := h.Unreadable(typ)
			for _, q := range stmts {
				if err := h.Exec(ctxOf(t), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			insert(t, d, row(t, typ, "good-2"))
			column := map[string]string{"good-1": "", "good-2": ""}
			for _, b := range bad {
				column[b.Key] = b.Column
			}
			// A listing reads each row apart: one it cannot read fails
			// neither the listing nor Stats.
			listed := list(t, d, driver.ListFilter{Types: []string{typ}})
			if len(listed) != len(column) {
				t.Fatalf("listed %d rows, want %d: %+v", len(listed), len(column), listed)
			}
			if _, err := d.Stats(ctxOf(t)); err != nil {
				t.Fatalf("Stats with unreadable rows pending: %v", err)
			}
			jobs, token := claim(t, d, typ)
			if len(jobs) != len(column) {
				t.Fatalf("claimed %d rows, want all %d, each read apart: %+v", len(jobs), len(column), jobs)
			}
			p := driver.SettleParams{Token: token}
			for _, j := range jobs {
				col, ok := column[j.Key]
				switch {
				case !ok:
					t.Fatalf("claimed a row of key %q, which was never stored", j.Key)
				case col == "" && j.Unreadable != "":
					t.Errorf("good row %s claimed as unreadable: %q", j.Key, j.Unreadable)
				case col != "" && !strings.HasPrefix(j.Unreadable, col+" "):
					t.Errorf("row %s: Unreadable %q, want it to name %s", j.Key, j.Unreadable, col)
				}
				if j.Unreadable != "" {
					p.Dead = append(p.Dead, driver.Failure{ID: j.ID, Error: "unreadable row: " + j.Unreadable})
				} else {
					p.Delivered = append(p.Delivered, j.ID)
				}
			}
			// Parking is a settle like any other: fenced by the token.
			if res := settleResult(t, d, driver.SettleParams{Token: token + 1, Dead: p.Dead}); len(res.Settled) != 0 || len(res.Fenced) != len(p.Dead) {
				t.Fatalf("parking under another token = %+v, want every row fenced", res)
			}
			if n := settle(t, d, p); n != len(jobs) {
				t.Fatalf("settled %d rows, want %d", n, len(jobs))
			}
			dead := list(t, d, driver.ListFilter{Types: []string{typ}, State: driver.StateDead})
			if len(dead) != len(bad) {
				t.Fatalf("%d rows dead, want the %d unreadable ones: %+v", len(dead), len(bad), dead)
			}
			for _, j := range dead {
				if !strings.HasPrefix(j.LastError, "unreadable row: "+column[j.Key]) {
					t.Errorf("dead row %s: last error %q", j.Key, j.LastError)
				}
			}
			stats, err := d.Stats(ctxOf(t))
			if err != nil {
				t.Fatalf("Stats with unreadable rows dead: %v", err)
			}
			for _, st := range stats {
				if st.Type == typ && (st.Dead != int64(len(bad)) || st.Pending != 0 || st.InFlight != 0) {
					t.Errorf("Stats = %+v, want %d dead and nothing pending", st, len(bad))
				}
			}
		}},
	}
}
