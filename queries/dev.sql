-- Queries of `synchro dev` (cmd/synchro/dev.go): the dev database and its demo schema.
-- The database name is fixed: it must equal devDatabase in cmd/synchro/dev.go.

-- synchro dev: whether the private cluster already has the dev database.
-- name: DevDatabaseExists :one
SELECT EXISTS (SELECT FROM pg_catalog.pg_database WHERE datname = 'synchro_dev') AS exists;

-- synchro dev: create the dev database on the private cluster's first run.
-- name: CreateDevDatabase :exec
CREATE DATABASE synchro_dev;

-- synchro dev: demo table of projects (idempotent; one transaction with the other two).
-- name: CreateDemoProjects :exec
CREATE TABLE IF NOT EXISTS public.projects (
  id   int8 PRIMARY KEY,
  name text NOT NULL
);

-- synchro dev: demo membership table, the scope rule's via relation.
-- name: CreateDemoProjectMembers :exec
CREATE TABLE IF NOT EXISTS public.project_members (
  id         int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  project_id int8 NOT NULL REFERENCES public.projects,
  user_id    text NOT NULL,
  CONSTRAINT project_members_once UNIQUE (project_id, user_id)
);

-- synchro dev: demo synced table.
-- name: CreateDemoTasks :exec
CREATE TABLE IF NOT EXISTS public.tasks (
  id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  project_id int8 NOT NULL REFERENCES public.projects,
  title      text NOT NULL,
  done       bool NOT NULL DEFAULT false
);

-- synchro dev: whether this pack has the registry functions and whether the demo is registered already.
-- name: DemoRegistryState :one
SELECT EXISTS (SELECT FROM pg_catalog.pg_proc
                WHERE proname = 'register_table' AND pronamespace = 'synchro'::regnamespace) AS have_registry,
       EXISTS (SELECT FROM synchro.relation WHERE relid = 'public.tasks'::regclass)      AS registered;

-- synchro dev: stage public.tasks as synced table "tasks".
-- name: DemoRegisterTasks :exec
SELECT synchro.register_table('public.tasks', 'tasks');

-- synchro dev: stage public.project_members as a capture dependency.
-- name: DemoRegisterProjectMembers :exec
SELECT synchro.register_dependency('public.project_members');

-- synchro dev: tasks reach scope user:<user_id> through project_members.
-- name: DemoAddScopeRule :exec
SELECT synchro.add_scope_rule('tasks', 'user:', 'project_id', 'public.project_members', 'project_id', 'user_id');

-- synchro dev: activate the staged demo registration.
-- name: DemoActivateRegistry :exec
SELECT synchro.activate_registry();

-- synchro dev: demo rows: project 1 with members alice and bob (so its tasks are in
-- scopes user:alice and user:bob) and two tasks with fixed keys. Idempotent: a restarted
-- dev keeps its rows. A DO block because sqlc's schema (the migrations) does not hold
-- the demo tables.
-- name: SeedDemo :exec
DO $seed$
BEGIN
  INSERT INTO public.projects (id, name) VALUES (1, 'Demo') ON CONFLICT (id) DO NOTHING;
  INSERT INTO public.project_members (project_id, user_id) VALUES (1, 'alice'), (1, 'bob')
  ON CONFLICT (project_id, user_id) DO NOTHING;
  INSERT INTO public.tasks (id, project_id, title) VALUES
    ('8b6f1a52-3c1e-4f0a-9d2b-7e4c5a6b1c01', 1, 'Read the quick start'),
    ('8b6f1a52-3c1e-4f0a-9d2b-7e4c5a6b1c02', 1, 'Push, rebuild and pull in psql')
  ON CONFLICT (id) DO NOTHING;
END
$seed$;

-- synchro dev: whether the runner has started the change stream (slot and baseline):
-- before it, rebuild and pull answer SY503, so dev prints what to type only afterwards.
-- name: DevStreamStarted :one
SELECT EXISTS (SELECT FROM synchro.runner_state()) AS started;
