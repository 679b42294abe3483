-- An operator's "dead" for a row in doubt: nobody sends it again; the
-- first argument says who decided and why, the second is the row.
UPDATE {{p}}outbox SET state = 'dead', lease_token = NULL, lease_until = NULL, last_error = ? WHERE id = ?;
