-- +goose Up
-- The consumer groups' change record (synchro.change) is written only while a consumer
-- group exists (issue 7: a change row per synced row event, with the row's image, is
-- about a tenth of the runner's CPU; most installations have no group). While none
-- exists nothing is recorded, so the record of a stream generation is complete only
-- after the point where recording last resumed: the first group created while no group
-- existed records the materialization high-watermark here, and a group created at
-- `earliest` never starts before it (synchro.create_consumer_group). No row: the record
-- is complete from the generation's start (recording never stopped: every release
-- before this one recorded always).
CREATE TABLE synchro.change_capture (
  stream_generation bigint PRIMARY KEY REFERENCES synchro.stream_generation,
  from_commit_lsn   pg_lsn NOT NULL, -- every change committed after it is recorded
  updated_at        timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE synchro.change_capture;
