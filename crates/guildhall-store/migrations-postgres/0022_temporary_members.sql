-- Temporary membership (an invite's `temporary`): the member is removed
-- when their last session disconnects, unless they hold a role by then.
ALTER TABLE members ADD COLUMN temporary BOOLEAN NOT NULL DEFAULT FALSE;
