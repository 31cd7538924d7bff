-- Nexmark q12: bids per bidder in 10 s processing-time windows. Flink windows on PROCTIME();
-- here ROWTIME, which is the arrival time because ddl.sql gives the streams no timestamp column.
CREATE MATERIALIZED VIEW nexmark_q12 AS
SELECT bidder, count(*) AS bid_count, window_start, window_end
FROM TUMBLE(bid, ROWTIME, INTERVAL '10' SECOND)
GROUP BY bidder, window_start, window_end;
