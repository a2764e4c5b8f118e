-- Placeholder for migration 002, which belongs to another branch (the
-- ledger). It exists only so that this branch's 003 and 004 load without a
-- gap; the integrator drops this file when 002 itself is merged.
SELECT 1;
