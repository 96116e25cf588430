-- +goose Up
-- Decoder selection (issue 10): the runner records the output plugin it decodes with
-- (synchro run --decoder), so readiness can say when it is not the plugin the stream
-- records (synchro.stream_generation.plugin); runner_state reports the stream's plugin
-- so the runner refuses a mismatch at start. Both function signatures change: the
-- function files create the new ones.
ALTER TABLE synchro.runner ADD COLUMN decoder text;
DROP FUNCTION IF EXISTS synchro.runner_claim(text, int, text, text, interval);
DROP FUNCTION IF EXISTS synchro.runner_state();

-- +goose Down
DROP FUNCTION IF EXISTS synchro.runner_claim(text, int, text, text, interval, text);
DROP FUNCTION IF EXISTS synchro.runner_state();
ALTER TABLE synchro.runner DROP COLUMN IF EXISTS decoder;
