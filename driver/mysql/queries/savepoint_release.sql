-- Ends the enqueue's savepoint (savepoint.sql); its rows stay in the
-- caller's transaction.
RELEASE SAVEPOINT mensageria_enqueue;
