-- One election round of candidate ?2 ("host/pid/random") for app ?1 at ?3
-- (now): takes the app's lease row when it has no live holder (released:
-- holder '', or run out at ?3 or before), or renews it when ?2 holds it,
-- until ?4. A takeover bumps the epoch that fences every claim
-- (claim_fence.sql) and restarts since; the first leader of an app gets
-- epoch 1. ?2's own renewal keeps the epoch and since, even past expiry:
-- no one else led in between, or holder would name them.
-- No row comes back when another candidate's lease still runs. The SET
-- expressions read the row as it was before the update.
INSERT INTO {{p}}leader (app, holder, epoch, since, expires_at) VALUES (?1, ?2, 1, ?3, ?4)
ON CONFLICT (app) DO UPDATE
SET epoch      = CASE WHEN holder = excluded.holder THEN epoch ELSE epoch + 1 END,
    since      = CASE WHEN holder = excluded.holder THEN since ELSE excluded.since END,
    holder     = excluded.holder,
    expires_at = excluded.expires_at
WHERE holder = excluded.holder OR holder = '' OR expires_at <= ?3
RETURNING epoch;
