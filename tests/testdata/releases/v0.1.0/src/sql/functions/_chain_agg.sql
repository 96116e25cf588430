-- rebuild's checksum chain as an aggregate: _chain_agg(seed, piece ORDER BY …) folds
-- h = SHA-256(h ‖ piece) over the pieces in the given order, from h = seed; NULL over
-- no rows. One set-based pass instead of a PL/pgSQL loop per row (CONTRACT.md
-- "Rebuild": the chain is sequential, so the ORDER BY is required).
-- The file sorts after _chain_add.sql, which defines the transition function.
CREATE OR REPLACE AGGREGATE synchro._chain_agg(seed bytea, piece bytea) (
  SFUNC = synchro._chain_add,
  STYPE = bytea
);

REVOKE ALL ON FUNCTION synchro._chain_agg(bytea, bytea) FROM PUBLIC;
