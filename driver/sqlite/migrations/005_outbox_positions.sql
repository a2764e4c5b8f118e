-- Nothing changes on SQLite: pos is the rowid, given at insert, already the
-- commit order (see the Postgres migration of the same number). The file
-- keeps the numbers of both dialects in step.
SELECT 1;
