-- idem:compatible-from 11
-- Holds migration 12's place for a change made beside this one; the
-- two meet when they merge, and this file then goes.
SELECT 1;
