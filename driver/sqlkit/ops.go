package sqlkit

import (
	"context"
	"database/sql"
	"strings"

	"github.com/xadm/mensageria/driver"
)

// DoubtAt is the test of a row in doubt (driver.StateInDoubt) at now, an
// expression: a placeholder, or the database's clock. Such a row is
// stored pending, marked by an at-most-once attempt, and not under a live
// lease.
func DoubtAt(now string) string {
	return "(state = 'pending' AND attempted_at IS NOT NULL AND (lease_until IS NULL OR lease_until <= " + now + "))"
}

// In writes a condition that col is one of n values, and the arguments it
// takes; each driver has its own way (placeholders, one JSON array).
type In[T any] func(col string, values []T) (cond string, args []any)

// List is how a driver writes the parts of its ListMessages statement.
type List struct {
	// Select is the statement up to its WHERE ("SELECT … FROM …") and
	// Args the arguments it takes.
	Select string
	Args   []any
	// Doubt is the condition true of a row in doubt, and DoubtArgs the
	// arguments it takes where it stands in the WHERE.
	Doubt     string
	DoubtArgs []any
	// Types and IDs write the filters on a list of types and of ids.
	Types In[string]
	IDs   In[int64]
}

// Query returns the statement of one page of f (f.EffectiveLimit rows),
// in id order, and its arguments. Its WHERE holds only the filters f gives, so that the
// database plans the listing on the index of what is given instead of one
// plan for every combination.
func (l List) Query(f driver.ListFilter) (string, []any) {
	var where []string
	args := append([]any(nil), l.Args...)
	and := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	switch f.State {
	case "":
	case driver.StateInDoubt:
		and(l.Doubt, l.DoubtArgs...)
	case driver.StatePending:
		and("state = 'pending' AND NOT "+l.Doubt, l.DoubtArgs...)
	default:
		and("state = ?", string(f.State))
	}
	if len(f.Types) > 0 {
		c, a := l.Types("type", f.Types)
		and(c, a...)
	}
	if len(f.IDs) > 0 {
		c, a := l.IDs("id", f.IDs)
		and(c, a...)
	}
	if f.AfterID > 0 {
		and("id > ?", f.AfterID)
	}
	q := l.Select
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY id LIMIT ?", append(args, f.EffectiveLimit())
}

// Revive moves the dead rows of the outbox (prefix+"outbox") p selects
// back to pending with a
// fresh attempt count, or deletes them (p.Discard), in w at now; it
// returns how many it changed. It selects by IDs, or by Types when IDs is
// empty (both narrow the set when both are given); with neither it
// changes nothing. Its WHERE holds only the selections given, written
// with ids and types. Errors are named "revive" with wrap.
func Revive(ctx context.Context, w Execer, prefix string, p driver.ReviveParams, ids In[int64], types In[string], now int64, wrap Wrap) (int, error) {
	if len(p.IDs) == 0 && len(p.Types) == 0 {
		return 0, nil
	}
	where := "state = 'dead'"
	var args []any
	if len(p.IDs) > 0 {
		c, a := ids("id", p.IDs)
		where += " AND " + c
		args = append(args, a...)
	}
	if len(p.Types) > 0 {
		c, a := types("type", p.Types)
		where += " AND " + c
		args = append(args, a...)
	}
	// Written out so that tests/model's scan of the statements that write
	// the outbox finds these two.
	o := prefix + "outbox"
	var res sql.Result
	var err error
	if p.Discard {
		res, err = w.ExecContext(ctx, "DELETE FROM "+o+" WHERE "+where, args...)
	} else {
		// A row an at-most-once attempt marked stays dead unless its mark
		// is cleared with it: pending and marked it would read as in doubt
		// and never be sent (ADR 0015).
		if !p.ClearMark {
			where += " AND attempted_at IS NULL"
		}
		// The count restarts so the relay's attempt limit applies afresh;
		// last_error stays as the reason it had died.
		res, err = w.ExecContext(ctx, "UPDATE "+o+" SET state = 'pending', attempts = 0, available_at = ?, lease_token = NULL, lease_until = NULL, attempted_at = NULL WHERE "+where,
			append([]any{now}, args...)...)
	}
	if err != nil {
		return 0, wrap("revive", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// InMarks is an In of one placeholder a value: col IN (?, ?, …), or
// col IN (NULL), which matches nothing, for no values.
func InMarks[T any](col string, values []T) (string, []any) {
	return col + " IN (" + Marks(len(values)) + ")", Args(values)
}

// Args is values as statement arguments, after the arguments before.
func Args[T any](values []T, before ...any) []any {
	out := make([]any, 0, len(before)+len(values))
	out = append(out, before...)
	for _, v := range values {
		out = append(out, v)
	}
	return out
}
