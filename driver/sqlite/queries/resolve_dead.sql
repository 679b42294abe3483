-- An operator's "dead" for row ?1 in doubt: nobody sends it again; ?2 says
-- who decided and why.
UPDATE {{p}}outbox SET state = 'dead', lease_token = NULL, lease_until = NULL, last_error = ?2 WHERE id = ?1;
