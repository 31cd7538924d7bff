-- Nexmark q17: auction statistics per auction and day, with filtered counts.
-- Maintained by recompute: the planner's incremental aggregates do not take
-- `count(*) FILTER (WHERE ...)` yet (the same query with sum(CASE WHEN ... THEN 1 ELSE 0 END)
-- is an incremental aggregate). Kept as Nexmark writes it.
CREATE MATERIALIZED VIEW nexmark_q17 AS
SELECT auction,
       to_char(date_time, 'YYYY-MM-DD') AS day,
       count(*) AS total_bids,
       count(*) FILTER (WHERE price < 10000) AS rank1_bids,
       count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
       count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
       min(price) AS min_price,
       max(price) AS max_price,
       avg(price) AS avg_price,
       sum(price) AS sum_price
FROM bid
GROUP BY to_char(date_time, 'YYYY-MM-DD'), auction;
