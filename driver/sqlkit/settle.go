package sqlkit

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"time"

	"github.com/xadm/mensageria/driver"
)

// Settlement is the bookkeeping of one Settle's transaction: the rows its
// statements changed so far, and how many of them were delivered, per
// type. The statements are the driver's; a Settlement reads what they
// return.
type Settlement struct {
	settled   map[int64]bool
	delivered map[string]int64
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

// SettleSteps are a driver's statements of one Settle, which Settle runs
// in the driver's transaction.
type SettleSteps struct {
	// Change records the outcomes on the rows still leased to the token
	// under a live lease, in the order of driver.SettleParams.IDs
	// (delivered, retried, dead, left in doubt, released), giving s the
	// rows of each statement that changed them (or locked them to
	// change).
	Change func(s *Settlement) error
	// Count adds the rows delivered, per type, to the minute's counts
	// (CountDelivered with the driver's statement). It is called only when
	// some were.
	Count func(perType map[string]int64) error
	// Expired returns the ids, one a row, of those of rest, the rows
	// Change did not change, still leased to the token but past the
	// lease; the others are gone or leased to another token. It is called
	// only when some rows were not changed.
	Expired func(rest []int64) (*sql.Rows, error)
}

// Settle runs st in order (the changes, the count of the deliveries, then
// the sorting of the rows of all not changed) and stops at the first
// error. The rows changed are Settled; of the others, those Expired
// returns are Expired and the rest Fenced. Errors are named "settle" and
// "settle counts" with wrap.
func Settle(all []int64, st SettleSteps, wrap Wrap) (driver.SettleResult, error) {
	s := &Settlement{settled: map[int64]bool{}, delivered: map[string]int64{}}
	if err := st.Change(s); err != nil {
		return driver.SettleResult{}, wrap("settle", err)
	}
	if len(s.delivered) > 0 {
		if err := st.Count(s.delivered); err != nil {
			return driver.SettleResult{}, wrap("settle counts", err)
		}
	}
	res, err := s.sort(all, st.Expired)
	if err != nil {
		return driver.SettleResult{}, wrap("settle", err)
	}
	return res, nil
}

// sort tells the rows of all this settlement changed (Settled) from those
// it could not: still ours but past the lease (Expired), or gone or
// leased to another token (Fenced).
func (s *Settlement) sort(all []int64, expired func(rest []int64) (*sql.Rows, error)) (driver.SettleResult, error) {
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
