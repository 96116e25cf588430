-- The membership-rule generation a scope is bound to: the newest generation of any
-- prefix row the scope starts with, 0 when none matches. Live prefixes never start one
-- another, but a prefix whose rules were removed keeps its row (with the generation
-- that removed them, so its scopes' cursors went stale then): once a shorter prefix
-- governs those scopes, the longest match would be the removed row, and a later change
-- of the shorter prefix's rules would leave their cursors valid over a membership the
-- change re-evaluated without pull effects
-- (TestPullCursorStaleAfterShorterPrefixRuleChange). Every row a scope matches had its
-- say in the scope's rules at some point, and each one's generation moves only when
-- its rules change, so the newest of them changes exactly when the scope's rules do.
CREATE OR REPLACE FUNCTION synchro._scope_rule_generation(scope text) RETURNS bigint
LANGUAGE sql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
  SELECT coalesce((SELECT max(sp.rule_generation) FROM synchro.scope_prefix sp
                    WHERE starts_with(scope, sp.scope_prefix)), 0)
$$;

REVOKE ALL ON FUNCTION synchro._scope_rule_generation(text) FROM PUBLIC;
