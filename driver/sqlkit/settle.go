package sqlkit

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"time"

	"github.com/xadm/mensageria/driver"
)

// Settlement is the bookkeeping of one Settle's transaction: the rows it
// changed so far, and how many of them were delivered, per type. The
// statements are the driver's; a Settlement reads what they return.
type Settlement struct {
	settled   map[int64]bool
	delivered map[string]int64
}

// NewSettlement returns an empty Settlement.
func NewSettlement() *Settlement {
	return &Settlement{settled: map[int64]bool{}, delivered: map[string]int64{}}
}

// Read records the rows of id and type that one settle statement changed
// (or locked to change), counting them as delivered when delivered, and
// returns their ids. It closes rows.
func (s *Settlement) Read(rows *sql.Rows, delivered bool) ([]int64, error) {
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		var typ string
		if err := rows.Scan(&id, &typ); err != nil {
			return ids, err
		}
		ids = append(ids, id)
		s.settled[id] = true
		if delivered {
			s.delivered[typ]++
		}
	}
	return ids, rows.Err()
}

// Delivered returns the rows recorded as delivered, per type.
func (s *Settlement) Delivered() map[string]int64 { return s.delivered }

// Sort tells the rows of all this settlement changed (Settled) from those
// it could not: still ours but past the lease (Expired), or gone or
// leased to another token (Fenced). expired, called only when some rows
// were not changed, runs the driver's statement that returns the ids of
// those of rest still leased to the token.
func (s *Settlement) Sort(all []int64, expired func(rest []int64) (*sql.Rows, error)) (driver.SettleResult, error) {
	var res driver.SettleResult
	var rest []int64
	for _, id := range all {
		if s.settled[id] {
			res.Settled = append(res.Settled, id)
		} else {
			rest = append(rest, id)
		}
	}
	if len(rest) == 0 {
		return res, nil
	}
	rows, err := expired(rest)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	ours := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return res, err
		}
		ours[id] = true
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	for _, id := range rest {
		if ours[id] {
			res.Expired = append(res.Expired, id)
		} else {
			res.Fenced = append(res.Fenced, id)
		}
	}
	return res, nil
}

// CountDelivered adds the rows delivered at now (unix microseconds), per
// type, to the minute's counts with q, a statement of type, minute and
// count. The types go in one order, so that two settlements lock the
// counts' rows in the same order.
func CountDelivered(ctx context.Context, w Execer, q string, perType map[string]int64, now int64) error {
	minute := now - now%time.Minute.Microseconds()
	for _, typ := range slices.Sorted(maps.Keys(perType)) {
		if _, err := w.ExecContext(ctx, q, typ, minute, perType[typ]); err != nil {
			return err
		}
	}
	return nil
}

// SettleSteps are a driver's statements of one Settle, run in its
// transaction; each records what it changed in the driver's Settlement.
type SettleSteps interface {
	// Delivered deletes (or, kept, marks) the delivered rows and adds them
	// to the minute's counts.
	Delivered() error
	// Released gives the released rows their attempt back.
	Released() error
	// Failed records the retries, the dead and the rows left in doubt.
	Failed() error
	// Sort tells the rows of all the steps changed from the Expired and
	// the Fenced (Settlement.Sort with the driver's statement).
	Sort(all []int64) (driver.SettleResult, error)
}

// Settle runs the steps of one Settle in their order (delivered,
// released, failed, then the sorting of every row of all) and stops at
// the first error.
func Settle(st SettleSteps, all []int64) (driver.SettleResult, error) {
	for _, step := range []func() error{st.Delivered, st.Released, st.Failed} {
		if err := step(); err != nil {
			return driver.SettleResult{}, err
		}
	}
	return st.Sort(all)
}
