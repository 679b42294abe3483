-- Which of the types {{types}} of a refused enqueue have an owner, read in
-- the transaction of the refusal: SIGNAL takes only a literal message, so
-- the trigger cannot name the type it refused, and the driver names the
-- first one this leaves out. A primary-key lookup per type.
SELECT name FROM {{p}}owners WHERE kind = 'type' AND name IN ({{types}});
