-- The app's lease row, read under a shared lock in the claim's (or the
-- probe's) transaction: the claim goes on only while epoch and holder
-- still give the fence's epoch a holder. A new leader's epoch (an UPDATE
-- of this row, election_take.sql) waits for this claim to commit, so no
-- claim of a deposed leader commits after its successor took over.
-- LOCK IN SHARE MODE is spelled so for MariaDB; MySQL 8.0 takes it too.
SELECT epoch, holder FROM {{p}}leader WHERE app = ? LOCK IN SHARE MODE;
