-- Undoes an enqueue the outbox refused, keeping the caller's transaction
-- (unless the server rolled it back whole, as for a deadlock victim).
ROLLBACK TO SAVEPOINT mensageria_enqueue;
