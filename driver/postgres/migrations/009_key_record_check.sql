-- idem:compatible-from 6
-- idem_expect raises IDM02 unless a statement wrote the rows it had to.
-- A batch's outcomes travel in COMMIT's round trip (KeyRecordCommit): the
-- check that each found its claim is made inside the statement, so that
-- a missing claim fails the transaction before COMMIT runs. Older
-- binaries never call it, so they keep serving on this schema.
CREATE FUNCTION idem_expect(got bigint, want bigint, what text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF got <> want THEN
    RAISE EXCEPTION 'idem: %: % of % claims found', what, got, want USING ERRCODE = 'IDM02';
  END IF;
  RETURN true;
END
$$;
