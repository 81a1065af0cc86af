-- The fencing token of a guild's owner. A node that becomes the guild's
-- owner claims the next epoch (owner_epoch + 1, one atomic update); every
-- write the owner makes afterwards first checks, in its own transaction,
-- that the row still holds that epoch, so an owner superseded by a newer
-- claim (a node that lost its lease and does not know it yet) has its
-- writes refused instead of overwriting the new owner's.
ALTER TABLE guilds ADD COLUMN owner_epoch INTEGER NOT NULL DEFAULT 0;
