-- Adapted from nexmark-flink (github.com/nexmark/nexmark, Apache License 2.0), file
-- nexmark-flink/src/main/resources/queries/q0.sql.
-- Changes: over the tables of ddl.sql, with the event files' column names (date_time for `dateTime`).
-- -------------------------------------------------------------------------------------------------
-- Query 0: Pass through (Not in original suite)
-- -------------------------------------------------------------------------------------------------
-- This measures the monitoring overhead of the Flink SQL implementation including the source generator.
-- Using `bid` events here, as they are most numerous with default configuration.
-- -------------------------------------------------------------------------------------------------

CREATE TABLE nexmark_q0 (
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  date_time  TIMESTAMP(3),
  extra  VARCHAR
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_q0
SELECT auction, bidder, price, date_time, extra FROM bid;
