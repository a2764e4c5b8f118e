-- idem:compatible-from 6
-- PostgreSQL's migration 9 adds idem_expect, which checks inside the
-- outcomes' statement that each found its claim. SQLite's driver checks
-- the count it is returned, in process: nothing changes here, and the
-- version keeps both dialects' migrations numbered alike.
SELECT 1;
