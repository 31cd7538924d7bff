-- Nexmark source tables for Flink SQL over the event files of bench/nexmark/generator.py.
-- ${EVENTS_DIR} is replaced by run_flink.py with the absolute path of the event directory.
--
-- Bounded filesystem sources (format json): the streaming job ends when the files are read.
-- date_time/expires are ISO-8601 UTC strings with milliseconds and 'Z' ("2024-01-01T00:00:00.123Z"),
-- which the json format parses natively as TIMESTAMP_LTZ(3) with 'json.timestamp-format.standard'
-- = 'ISO-8601' (TIMESTAMP(3) would reject the 'Z'); run_flink.py sets table.local-time-zone = UTC
-- so window bounds, HOUR() and DATE_FORMAT() are in UTC. date_time is the event-time attribute
-- with the watermark of Flink's Nexmark (4 seconds of out-of-orderness) on all three tables, as on
-- nexmark-flink's datagen table.

CREATE TABLE person (
    id  BIGINT,
    name  VARCHAR,
    email_address  VARCHAR,
    credit_card  VARCHAR,
    city  VARCHAR,
    state  VARCHAR,
    date_time  TIMESTAMP_LTZ(3),
    extra  VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
    'connector' = 'filesystem',
    'path' = 'file://${EVENTS_DIR}/person.jsonl',
    'format' = 'json',
    'json.timestamp-format.standard' = 'ISO-8601'
);

CREATE TABLE auction (
    id  BIGINT,
    item_name  VARCHAR,
    description  VARCHAR,
    initial_bid  BIGINT,
    reserve  BIGINT,
    date_time  TIMESTAMP_LTZ(3),
    expires  TIMESTAMP_LTZ(3),
    seller  BIGINT,
    category  BIGINT,
    extra  VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
    'connector' = 'filesystem',
    'path' = 'file://${EVENTS_DIR}/auction.jsonl',
    'format' = 'json',
    'json.timestamp-format.standard' = 'ISO-8601'
);

CREATE TABLE bid (
    auction  BIGINT,
    bidder  BIGINT,
    price  BIGINT,
    channel  VARCHAR,
    url  VARCHAR,
    date_time  TIMESTAMP_LTZ(3),
    extra  VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
    'connector' = 'filesystem',
    'path' = 'file://${EVENTS_DIR}/bid.jsonl',
    'format' = 'json',
    'json.timestamp-format.standard' = 'ISO-8601'
);
