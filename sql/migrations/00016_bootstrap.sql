-- +goose Up
-- Projection bootstrap and controlled reconfiguration (issue 8, items 5 and 6;
-- docs/bootstrap.md). A registry activation that introduces rows the active projections
-- do not hold (a table that holds rows, a registered column, a dependency, a table
-- recreated under the same logical identity) stages them in the activation
-- transaction; the runner merges them when it materializes that transaction, at its
-- transaction end, in the same stream generation.

-- What an activation changes about a relation's projection. kind 'project': the
-- relation's projection is replaced by the staged rows (synchro.bootstrap_row) at the
-- activation's position; 'remove': the relation left the registry and its projection,
-- rule index and membership go. Written by synchro.activate_registry, read and emptied
-- by the runner's materialization of the activation (synchro._bootstrap_merge).
CREATE TABLE synchro.bootstrap (
  generation  bigint NOT NULL REFERENCES synchro.registry_generation,
  relation_id bigint NOT NULL REFERENCES synchro.relation,
  kind        text   NOT NULL CONSTRAINT bootstrap_kind CHECK (kind IN ('project', 'remove')),
  row_count   bigint NOT NULL DEFAULT 0,
  staged_at   timestamptz NOT NULL DEFAULT now(),
  merged_at   timestamptz,
  PRIMARY KEY (generation, relation_id)
);

-- The staged rows of a 'project' bootstrap: each row of the relation as the activation
-- transaction read it (the table locked against writes), rendered in the registered
-- shape of the new generation, with its row version.
CREATE TABLE synchro.bootstrap_row (
  generation  bigint NOT NULL,
  relation_id bigint NOT NULL,
  pk          text   NOT NULL,
  pk_int      bigint,
  version     text   NOT NULL,
  image       jsonb  NOT NULL,
  PRIMARY KEY (generation, relation_id, pk),
  FOREIGN KEY (generation, relation_id) REFERENCES synchro.bootstrap
);

-- A staged new physical identity for a registered relation that was dropped and
-- recreated (synchro.rebind_relation): activation moves relation.relid and its
-- qualified name to it. staged_lsn is the WAL position when it was staged, after the
-- old relation was dropped: activation waits until the runner processed past it, so no
-- change of the old relation is left to decode under the old OID.
CREATE TABLE synchro.relation_rebind (
  generation  bigint NOT NULL REFERENCES synchro.registry_generation,
  relation_id bigint NOT NULL REFERENCES synchro.relation,
  relid       oid    NOT NULL,
  schema_name name   NOT NULL,
  table_name  name   NOT NULL,
  staged_lsn  pg_lsn NOT NULL,
  PRIMARY KEY (generation, relation_id)
);

REVOKE ALL ON synchro.bootstrap, synchro.bootstrap_row, synchro.relation_rebind FROM PUBLIC;

-- +goose Down
DROP TABLE synchro.relation_rebind, synchro.bootstrap_row, synchro.bootstrap;
