-- An opaque, server-generated row version: 128 random bits as 32 hex digits.
-- Clients compare versions for equality only; nothing about their order or content
-- means anything, and no clock, sequence or LSN is involved.
CREATE OR REPLACE FUNCTION synchro._new_version() RETURNS text
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$ SELECT replace(gen_random_uuid()::text, '-', '') $$;

REVOKE ALL ON FUNCTION synchro._new_version() FROM PUBLIC;
