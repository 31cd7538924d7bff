-- Nexmark q0: pass-through. Measures the cost of ingesting and keeping every bid.
-- Maintained incrementally (a linear query).
CREATE MATERIALIZED VIEW nexmark_q0 AS
SELECT auction, bidder, price, date_time, extra
FROM bid;
