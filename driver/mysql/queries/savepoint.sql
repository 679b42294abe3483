-- Opens the savepoint an enqueue into the caller's transaction runs in:
-- a refused row rolls back to it (savepoint_rollback.sql), and the
-- caller's transaction stays usable.
SAVEPOINT mensageria_enqueue;
