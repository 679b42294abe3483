-- The database clock in unix microseconds ({{now}}). Every write
-- transaction of the driver reads it once, first, so that every comparison
-- in the transaction agrees; the reads outside one read it on their own.
SELECT {{now}};
