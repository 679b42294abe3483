-- The server's version ("10.11.6-MariaDB", "8.0.36"), which Open and New
-- check: claims need SELECT … FOR UPDATE SKIP LOCKED, so MariaDB 10.6 or
-- MySQL 8.0 at least.
SELECT VERSION();
