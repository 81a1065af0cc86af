-- A member's timeout: until when (Unix ms) they may only read. NULL: none.
-- Past values are left in place and read as none: a timeout ends by
-- itself at its time, with no write.
ALTER TABLE members ADD COLUMN communication_disabled_until_ms BIGINT;
