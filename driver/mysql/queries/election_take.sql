-- A candidate takes a free, run-out or released lease: holder, the next
-- epoch (which fences the claims of the one before: claim_fence.sql),
-- since and until, and its health.
UPDATE {{p}}leader SET holder = ?, epoch = ?, since = ?, expires_at = ?, health = ? WHERE app = ?;
