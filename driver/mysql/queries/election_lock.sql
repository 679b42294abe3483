-- The app's lease row (election_acquire.sql made sure it exists), locked
-- for the round: holder ('' when released), epoch and when the lease runs
-- out. Another candidate's round waits here until this one commits.
SELECT holder, epoch, expires_at FROM {{p}}leader WHERE app = ? FOR UPDATE;
