-- Nexmark q1: currency conversion, dollars to euros. Incremental (linear).
CREATE MATERIALIZED VIEW nexmark_q1 AS
SELECT auction,
       bidder,
       0.908 * price AS price,
       date_time,
       extra
FROM bid;
