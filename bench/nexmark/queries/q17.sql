-- Nexmark q17: auction statistics per auction and day, with filtered counts.
-- One Reduce per (day, auction) on the pipeline (EXPLAIN: `count(*) FILTER (WHERE p)` is
-- planned as count(CASE WHEN p THEN 1 END)). Kept as Nexmark writes it.
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
