-- The fence of a claim (claim.sql, claim_in_doubt.sql) by app ?1's leader
-- of an epoch: the app's lease row, read in the claim's own transaction. A
-- relay whose epoch is no longer the row's, or whose lease was released
-- (holder ''), was deposed and claims nothing.
SELECT epoch, holder FROM {{p}}leader WHERE app = ?1;
