-- The todo example's schema: the todos table, the device table its scope authorizer
-- consults, the roles, and the Synchro registration. Applied by the example itself
-- (todo migrate, or at start) with goose, as the role that installed Synchro (a
-- superuser in `synchro dev`): registration and set_scope_authorizer are operator
-- functions.
--
-- No Down section: Synchro has no unregistration, and a table_id is never reused.

-- +goose Up

-- Roles are cluster-wide: a second database of the same cluster finds them already there.
-- +goose StatementBegin
DO $$
BEGIN
  -- The service's role: synchro_app (push, pull, rebuild) plus DML on todos, under the
  -- row-level security policy below.
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'todo_app') THEN
    CREATE ROLE todo_app NOLOGIN;
  END IF;
  -- Owns the scope authorizer: not a superuser, not the pack owner, cannot read
  -- synchro's tables; it may read todo.devices and nothing else.
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'todo_authz') THEN
    CREATE ROLE todo_authz NOLOGIN;
  END IF;
END
$$;
-- +goose StatementEnd
GRANT synchro_app TO todo_app;

CREATE SCHEMA todo;
GRANT USAGE ON SCHEMA todo TO todo_app, todo_authz;

-- One row per todo. The key is a uuid the device makes, so a device creates todos
-- offline without asking the server for an id.
CREATE TABLE todo.todos (
  id    uuid PRIMARY KEY,
  owner text NOT NULL,
  title text NOT NULL CONSTRAINT title_length CHECK (length(title) BETWEEN 1 AND 500),
  done  boolean NOT NULL DEFAULT false
);
GRANT SELECT, INSERT, UPDATE, DELETE ON todo.todos TO todo_app;

-- A user reads and writes only their own todos. The service sets todo.user_id in the
-- transaction of each push; synchro.push writes with the caller's privileges and
-- policies, so a mutation of another user's todo finds no row (a conflict with a null
-- row) and a todo given away to another owner is rejected (42501).
ALTER TABLE todo.todos ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_todos ON todo.todos
  USING (owner = current_setting('todo.user_id', true))
  WITH CHECK (owner = current_setting('todo.user_id', true));

-- The devices the service has seen, and whose they are: what the scope authorizer
-- decides on. The service records a device when it authenticates its user.
CREATE TABLE todo.devices (
  client_id text PRIMARY KEY,
  user_id   text NOT NULL
);
GRANT SELECT, INSERT ON todo.devices TO todo_app;
GRANT SELECT ON todo.devices TO todo_authz;

-- The scope authorizer (docs/security.md, "Writing a scope authorizer"): a device may
-- read scope todos:<user> only when the service recorded it as that user's. SECURITY
-- DEFINER with a pinned search_path, owned by todo_authz.
CREATE SCHEMA todo_authz AUTHORIZATION todo_authz;
CREATE FUNCTION todo_authz.may_read(client_id text, scope text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT EXISTS (SELECT 1 FROM todo.devices d
                  WHERE d.client_id = may_read.client_id
                    AND 'todos:' || d.user_id = may_read.scope)
$$;
ALTER FUNCTION todo_authz.may_read(text, text) OWNER TO todo_authz;

-- Synced as table_id "todos"; a todo belongs to scope todos:<owner>. The table is
-- empty here, so it may join a stream that is already running.
SELECT synchro.register_table('todo.todos', 'todos');
SELECT synchro.add_scope_rule('todos', 'todos:', 'owner');
SELECT synchro.activate_registry();
SELECT synchro.set_scope_authorizer('todo_authz.may_read(text, text)');
