-- Takes the migrators' lock, named after the database and the prefix
-- (the first argument), waiting at most the second (seconds): 1 when
-- taken. GET_LOCK belongs to the connection, so the migrator runs every
-- script on that one connection, and one that dies mid-way releases it
-- with the connection.
SELECT GET_LOCK(CONCAT(DATABASE(), '.', ?), ?);
