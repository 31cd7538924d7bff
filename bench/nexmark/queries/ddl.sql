-- Nexmark streams for StreamDB: the three event kinds as append-only streams, with the columns
-- of the Nexmark reference in lower-case snake case (as RisingWave's nexmark DDL).
-- No `WITH (timestamp = 'date_time')`: ROWTIME stays the arrival time, which is the processing
-- time q12 windows on (Flink's PROCTIME()); every other query uses date_time explicitly.
CREATE STREAM person (
    id BIGINT,
    name VARCHAR,
    email_address VARCHAR,
    credit_card VARCHAR,
    city VARCHAR,
    state VARCHAR,
    date_time TIMESTAMPTZ,
    extra VARCHAR
);

CREATE STREAM auction (
    id BIGINT,
    item_name VARCHAR,
    description VARCHAR,
    initial_bid BIGINT,
    reserve BIGINT,
    date_time TIMESTAMPTZ,
    expires TIMESTAMPTZ,
    seller BIGINT,
    category BIGINT,
    extra VARCHAR
);

CREATE STREAM bid (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel VARCHAR,
    url VARCHAR,
    date_time TIMESTAMPTZ,
    extra VARCHAR
);
