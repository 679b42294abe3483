-- An operator's "retry" for a row in doubt: the receiver does not have the
-- effect, so the mark is cleared and the row is due at {{now}} for one
-- more attempt, its attempts kept; the first argument says who decided
-- and why, the second is the row.
UPDATE {{p}}outbox SET attempted_at = NULL, available_at = {{now}}, lease_token = NULL, lease_until = NULL, last_error = ? WHERE id = ?;
