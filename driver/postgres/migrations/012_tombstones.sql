-- idem:compatible-from 6
-- A key whose answer's retention passed is remembered as a tombstone
-- until --key-memory after its first arrival: the janitor moves it here
-- from idem_keys, keeping what a later copy is judged by and nothing it
-- could be answered with. id is driver.TombstoneID (16 bytes of SHA-256
-- of scope, operation and key) and fingerprint driver.TombstoneFingerprint
-- (16 bytes of SHA-256 of the request's fingerprint): fixed sizes, so a
-- row's data is 47 bytes and the tenant's name whatever the key's length
-- (docs/operations.md, "What idem keeps"). A new table and two functions: older binaries never
-- name them, and keep serving as they always did (they forget a key after
-- its retention, and their janitor deletes records without tombstones).
--
-- The key leads with the tenant (scope), as every tenant table's does
-- (docs/architecture.md, "Past one primary"): the claim finds a key's
-- tombstone on the tenant's rows. It costs the tenant's name in each row.
CREATE TABLE idem_tombstones (
    scope       text        NOT NULL,
    id          bytea       NOT NULL,
    fingerprint bytea       NOT NULL,
    status      integer     NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, id)
);

CREATE INDEX idem_tombstones_created_at ON idem_tombstones (created_at);

-- idem_tombstone_id is driver.TombstoneID: the first 16 bytes of SHA-256
-- of scope, operation and key in UTF-8, each preceded by its length in
-- bytes (4 bytes, big-endian).
CREATE FUNCTION idem_tombstone_id(scope text, operation text, key text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT substr(sha256(
      int4send(octet_length(convert_to(scope, 'UTF8'))) || convert_to(scope, 'UTF8') ||
      int4send(octet_length(convert_to(operation, 'UTF8'))) || convert_to(operation, 'UTF8') ||
      int4send(octet_length(convert_to(key, 'UTF8'))) || convert_to(key, 'UTF8')), 1, 16)
$$;

-- idem_claimable raises IDM04 when the key has a live tombstone. The claim
-- calls it in RETURNING, after its insert: a claim that waited on a row the
-- janitor was moving here inserts once the janitor commits, and its own
-- snapshot, older than that commit, missed the tombstone. A plpgsql
-- function's query takes a snapshot of its own, which sees it.
CREATE FUNCTION idem_claimable(scope text, operation text, key text, forget_before timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM idem_tombstones t
              WHERE t.scope = $1 AND t.id = idem_tombstone_id($1, $2, $3) AND t.created_at > $4) THEN
    RAISE EXCEPTION 'idem: the key was moved to its tombstone while claimed' USING ERRCODE = 'IDM04';
  END IF;
  RETURN true;
END
$$;
