-- A message's files as JSON (guildhall_proto::model::Attachment without
-- its URLs, which are made when the message is shown; NULL: none). The
-- bytes are in the blob store, under attachments/{channel}/{id}/{name}.
ALTER TABLE messages ADD COLUMN attachments TEXT;
