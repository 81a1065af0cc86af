-- The application that created a webhook (its bot did); NULL for one a
-- user created. Discord's webhook object names it, and such an
-- "application-owned" webhook may send every component with
-- ?with_components=true, any other webhook only non-interactive ones.
ALTER TABLE webhooks ADD COLUMN application_id INTEGER;
