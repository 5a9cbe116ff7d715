-- Quickstart: a Paimon table in lake-stream mode.
-- Run: cargo run --bin lakestream-cli -- --warehouse ./warehouse -f examples/quickstart.sql

CREATE TABLE IF NOT EXISTS orders (id INT, item STRING, qty INT);

-- Rows written before the mode is turned on stay in Paimon: the table is
-- promoted in place.
INSERT INTO orders VALUES (1, 'apple', 3), (2, 'pear', 5);

ALTER TABLE orders SET TBLPROPERTIES ('lakestream.enabled' = 'true');

SELECT key, value FROM orders$options WHERE key = 'lakestream.enabled';

SELECT * FROM orders ORDER BY id;

-- Renaming would break the store's mapping to the table, so it is refused
-- while the mode is on. Turning the mode off only touches the catalog.
ALTER TABLE orders SET TBLPROPERTIES ('lakestream.enabled' = 'false');
