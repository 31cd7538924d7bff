-- Not a Nexmark query: a plain aggregate over the bid stream, for the memory figures of
-- docs/benchmarks.md (server + JVM peak RSS as the stream grows; the state grows with auctions).
CREATE MATERIALIZED VIEW nexmark_bids_by_auction AS
SELECT auction, count(*) AS bids, max(price) AS top, sum(price) AS total
FROM bid
GROUP BY auction;
