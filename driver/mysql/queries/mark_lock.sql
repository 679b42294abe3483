-- The rows of ids {{ids}} that mark.sql may mark: still leased to token ?
-- under a live lease at {{now}}, not marked yet; locked until the commit.
-- MySQL has no UPDATE … RETURNING, so this read tells which rows mark.sql
-- may mark. Primary-key lookups.
SELECT id FROM {{p}}outbox
 WHERE id IN ({{ids}})
   AND state = 'pending' AND lease_token = ? AND lease_until > {{now}} AND attempted_at IS NULL
   FOR UPDATE;
