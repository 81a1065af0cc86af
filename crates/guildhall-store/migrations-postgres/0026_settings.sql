-- Cluster-wide settings every node must agree on, created by the first
-- node that needs one (INSERT ... ON CONFLICT DO NOTHING, then read):
-- the key attachment URLs are signed with, so any api node verifies what
-- another signed.
CREATE TABLE settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
