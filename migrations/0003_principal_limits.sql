-- Limits and usage per principal (docs/design.md §4.1). Times are Unix seconds; days
-- are UTC dates 'YYYY-MM-DD'. Nothing here holds content or a key.

-- The operator's limits (`npm run admin -- limits set`). NULL = unlimited, as before
-- this table existed; a principal with no row has no limit. Changing a limit is not a
-- policy revision: pages stay retrievable.
CREATE TABLE principal_limits (
  principal            TEXT PRIMARY KEY,
  requests_per_minute  INTEGER CHECK (requests_per_minute >= 0),
  tokens_per_day       INTEGER CHECK (tokens_per_day >= 0),
  sessions_per_day     INTEGER CHECK (sessions_per_day >= 0),
  active_bytes         INTEGER CHECK (active_bytes >= 0),
  updated_at           INTEGER NOT NULL
);

-- One row per admitted generation of a principal that has `requests_per_minute` set:
-- the limit is a sliding 60 s window, checked and counted in one statement (no race),
-- and `Retry-After` is when the oldest row in the window leaves it. The scheduled
-- cleanup deletes rows older than the window.
CREATE TABLE principal_requests (
  principal  TEXT NOT NULL,
  at         INTEGER NOT NULL
);
CREATE INDEX principal_requests_recent ON principal_requests (principal, at);

-- `sessions_per_day` counts roleplay_sessions created since the UTC day began.
CREATE INDEX roleplay_sessions_created ON roleplay_sessions (principal, created_at);

-- Usage as the providers reported it, one row per (principal, UTC day, model), one
-- upsert per answered turn (after the answer). input_tokens is every input token the
-- provider processed (OpenAI's prompt/input tokens; Anthropic's input + cache read +
-- cache write), cached_input_tokens the part read from a prompt cache,
-- cache_write_tokens the part written to one (Anthropic). `estimated` counts the turns
-- whose figures the edge estimated because the provider reported none.
CREATE TABLE principal_usage (
  principal            TEXT NOT NULL,
  day                  TEXT NOT NULL,
  model                TEXT NOT NULL,
  requests             INTEGER NOT NULL DEFAULT 0,
  input_tokens         INTEGER NOT NULL DEFAULT 0,
  cached_input_tokens  INTEGER NOT NULL DEFAULT 0,
  cache_write_tokens   INTEGER NOT NULL DEFAULT 0,
  output_tokens        INTEGER NOT NULL DEFAULT 0,
  estimated            INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (principal, day, model)
);
