-- Nexmark q14: calculation, a filter with a CASE on the hour of the bid and a character count.
-- The reference's user function count_char(extra, 'c') is inlined (no user functions here) as
-- RisingWave's SQL definition of it: LENGTH(s) - LENGTH(REPLACE(s, c, '')).
CREATE MATERIALIZED VIEW nexmark_q14 AS
SELECT auction,
       bidder,
       0.908 * price AS price,
       CASE
           WHEN extract(hour FROM date_time) >= 8 AND extract(hour FROM date_time) <= 18 THEN 'dayTime'
           WHEN extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 THEN 'nightTime'
           ELSE 'otherTime'
           END AS bidtimetype,
       date_time,
       extra,
       LENGTH(extra) - LENGTH(REPLACE(extra, 'c', '')) AS c_counts
FROM bid
WHERE 0.908 * price > 1000000
  AND 0.908 * price < 50000000;
