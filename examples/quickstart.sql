-- The quickstart: a Paimon table in lake-stream mode, from creation to tiering.
-- Run it with:  cargo run --bin lakestream-cli -- -e -f examples/quickstart.sql
-- (a warehouse appears in ./warehouse; delete it to start over).

-- 1. A lake-stream table: its name, schema and history live in Paimon, its
--    writes go to the store (`local`, the embedded one, by default).
CREATE TABLE IF NOT EXISTS orders (id INT NOT NULL, item STRING, qty INT, PRIMARY KEY (id))
WITH ('bucket' = '1', 'lakestream.enabled' = 'true');

-- 2. Writes are acknowledged once the store has them on disk.
INSERT INTO orders VALUES (1, 'apple', 3), (2, 'pear', 5), (3, 'plum', 1);

-- 3. `orders` reads Paimon snapshots: the new rows are not there yet ...
SELECT count(*) AS rows_in_paimon FROM orders;

-- 4. ... while `orders$rt` reads the store too: the rows are there at once.
SELECT * FROM orders$rt ORDER BY id;

-- 5. A primary-key table upserts: the newest version of a key wins.
INSERT INTO orders VALUES (2, 'pear', 7);
DELETE FROM orders WHERE id = 3;
SELECT * FROM orders$rt ORDER BY id;

-- 6. Tiering moves the store's rows into Paimon. In the background, the
--    writing process checks every 5 s (`local.tier-interval`) and tiers a
--    table once 128 MB of its rows wait (`local.tier-target-size`) or the
--    oldest has waited 3 min (`local.tier-max-delay`); here, now.
CALL sys.lakestream_tier('orders');

-- 7. Paimon has them now, as an ordinary snapshot any Paimon reader sees.
SELECT * FROM orders ORDER BY id;
SELECT snapshot_id, commit_user FROM orders$snapshots ORDER BY snapshot_id;
