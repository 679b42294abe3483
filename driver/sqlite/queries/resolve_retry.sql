-- An operator's "retry" for row ?1 in doubt: the receiver does not have
-- the effect, so the mark is cleared and the row is due at ?2 for one more
-- attempt, its attempts kept; ?3 says who decided and why.
UPDATE {{p}}outbox SET attempted_at = NULL, available_at = ?2, lease_token = NULL, lease_until = NULL, last_error = ?3 WHERE id = ?1;
