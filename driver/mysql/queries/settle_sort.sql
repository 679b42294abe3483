-- Of the rows of ids {{ids}} a settle could not change, those still
-- leased to token ? but past the lease at now (the last argument): they
-- are Expired; the others are gone or leased to another token (Fenced).
SELECT id FROM {{p}}outbox
 WHERE id IN ({{ids}})
   AND state = 'pending' AND lease_token = ? AND lease_until <= ?;
