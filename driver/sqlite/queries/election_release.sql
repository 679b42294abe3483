-- Gives up app ?2's lease when candidate ?3 holds it: holder '' and the
-- lease ended at ?1 (now), so the next round of any candidate takes it
-- over, bumping the epoch. Releasing a lease another candidate took over
-- changes nothing.
UPDATE {{p}}leader SET holder = '', expires_at = ?1 WHERE app = ?2 AND holder = ?3;
