-- Nexmark q2: selection, the bids of every 123rd auction (Flink's form: MOD(auction, 123) = 0).
-- Incremental (linear).
CREATE MATERIALIZED VIEW nexmark_q2 AS
SELECT auction, price
FROM bid
WHERE auction % 123 = 0;
