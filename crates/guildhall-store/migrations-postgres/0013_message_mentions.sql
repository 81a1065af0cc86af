-- Who a message mentions, as computed when it was posted or its content
-- last edited (Discord rebuilds the lists then, not on read): the JSON of
-- guildhall_proto::mentions::Stored (user objects, role ids, everyone,
-- the replied-to author). NULL: nobody.
ALTER TABLE messages ADD COLUMN mentions TEXT;
