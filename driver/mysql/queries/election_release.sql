-- The holder (the last argument) gives its lease up at once (run out at
-- now, the first), so a standby takes over without waiting for it; the
-- epoch stays, the next holder raises it. A row another holder took is
-- left alone.
UPDATE {{p}}leader SET holder = '', expires_at = ? WHERE app = ? AND holder = ?;
