-- Gives app $1's election up, if relay $2 still holds it: the lease ends
-- now, so a standby takes over at its next round instead of a lease later.
-- The epoch stays; the next holder bumps it.
UPDATE {{schema}}.leader
SET holder = '', expires_at = now(), health = ''
WHERE app = $1 AND holder = $2;
