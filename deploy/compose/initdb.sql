-- The receiving app's database; the sending app's (pedidos) is
-- POSTGRES_DB. Run once, when the data directory is created.
CREATE DATABASE faturamento;
