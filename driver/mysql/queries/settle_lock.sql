-- The rows of ids {{ids}} a settle may change: still leased to token ?
-- under a live lease at now (the last argument); locked until the commit.
-- MySQL has no UPDATE … RETURNING, so this read tells which rows take the
-- outcome (and their types, for delivered_count.sql); the change that
-- follows (settle_*.sql) names only these. Primary-key lookups.
SELECT id, type FROM {{p}}outbox
 WHERE id IN ({{ids}})
   AND state = 'pending' AND lease_token = ? AND lease_until > ?
   FOR UPDATE;
