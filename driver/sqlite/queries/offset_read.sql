-- The stored offset of consumer ?1 in partition ?3 of source ?2, if any:
-- a consumer that keeps its offsets with its effects reads it in the same
-- transaction.
SELECT "offset" FROM {{p}}offsets WHERE consumer = ?1 AND source = ?2 AND partition = ?3;
