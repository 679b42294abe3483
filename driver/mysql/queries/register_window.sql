-- The owner's registration of a consumer sets its window (the first
-- argument and again the last; the owner's inbox is the one source of
-- it), of kind and name; unchanged (<=>, which is true of two NULLs), the
-- row is not written.
UPDATE {{p}}owners SET dedup_window_us = ? WHERE kind = ? AND name = ? AND NOT (dedup_window_us <=> ?);
