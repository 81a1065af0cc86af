-- Discord's max_concurrency: a bot's IDENTIFYs fall in buckets
-- (shard_id % max_concurrency) and each bucket admits one per window
-- (5 s). One row per bot and bucket that identified within a window,
-- shared by every gateway node; an IDENTIFY is one conditional UPDATE.
-- Rows whose window ended are reused, or deleted when the table holds
-- session_start_bots_max rows.
CREATE TABLE identify_buckets (
    user_id BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    identified_at_ms BIGINT NOT NULL,
    PRIMARY KEY (user_id, bucket)
);
-- The sweep of ended windows when the table is full reads by age.
CREATE INDEX identify_buckets_by_time ON identify_buckets (identified_at_ms);
