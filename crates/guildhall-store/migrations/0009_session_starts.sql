-- Each bot's session starts (IDENTIFYs) in its current window: Discord's
-- session start limit, counted where every gateway node sees the same
-- count. One row per bot identified within a window; an IDENTIFY is one
-- UPDATE of it. Rows whose window ended are reused, or deleted when the
-- table holds session_start_bots_max rows. No key to users: the row is a
-- counter, and a deleted bot's row only ages out.
CREATE TABLE session_starts (
    user_id INTEGER PRIMARY KEY,
    window_start_ms INTEGER NOT NULL,
    starts INTEGER NOT NULL
);
-- The sweep of ended windows when the table is full reads by age.
CREATE INDEX session_starts_by_window ON session_starts (window_start_ms);
