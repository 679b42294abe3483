-- The owner's registration of a consumer sets its window ?1 (the owner's
-- inbox is the one source of it), of kind ?2 and name ?3; unchanged, the
-- row is not written.
UPDATE {{p}}owners SET dedup_window_us = ?1 WHERE kind = ?2 AND name = ?3 AND dedup_window_us IS NOT ?1;
