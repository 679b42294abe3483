-- Marks at {{now}} the rows of ids {{ids}} still leased to token ? under a
-- live lease and not marked yet, as attempted on an at-most-once route:
-- from now on the request may reach the receiver, so no claim takes them
-- again until a definite outcome clears the mark. The driver first locks
-- the rows it marks (mark_lock.sql) in the same transaction, and commits
-- before anything is sent; only the rows it locked may be sent.
UPDATE {{p}}outbox SET attempted_at = {{now}}
 WHERE id IN ({{ids}});
