-- Moves the catalog entry of kind ?3 and name ?4 to app ?1 since ?2. The
-- caller read the entry in the same immediate transaction and checked it
-- still belongs to the app giving it away (a compare-and-set).
UPDATE {{p}}owners SET app = ?1, since = ?2 WHERE kind = ?3 AND name = ?4;
