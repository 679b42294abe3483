-- The database clock in unix microseconds, read once at the start of each
-- of the driver's transactions so that every comparison in it agrees; the
-- reads outside one have {{now}} in their statement instead.
-- UTC_TIMESTAMP does not depend on the session's time_zone, which
-- UNIX_TIMESTAMP(NOW()) does around a daylight-saving change.
SELECT {{now}};
