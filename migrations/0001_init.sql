-- Roleplay edge schema (docs/design.md §4). Times are Unix seconds.

-- Roleplay API keys, stored only as the hex SHA-256 of the key.
CREATE TABLE roleplay_keys (
  key_sha256  TEXT PRIMARY KEY,
  principal   TEXT NOT NULL,
  created_at  INTEGER NOT NULL,
  revoked_at  INTEGER
);
CREATE INDEX roleplay_keys_principal ON roleplay_keys (principal);

CREATE TABLE roleplay_sessions (
  session_id  TEXT PRIMARY KEY,
  principal   TEXT NOT NULL,
  created_at  INTEGER NOT NULL,
  ended_at    INTEGER
);
CREATE INDEX roleplay_sessions_principal ON roleplay_sessions (principal);

-- The current policy of a principal. A new revision makes earlier pages unretrievable.
CREATE TABLE principal_policies (
  principal   TEXT PRIMARY KEY,
  revision    INTEGER NOT NULL,
  grants      TEXT NOT NULL DEFAULT '[]',          -- JSON array of grant names, e.g. ["chat"]
  retention   TEXT NOT NULL CHECK (retention IN ('standard', 'zero')),
  updated_at  INTEGER NOT NULL
);

-- provider:model -> window sizes in tokens.
CREATE TABLE models (
  model              TEXT PRIMARY KEY,
  input_tokens       INTEGER NOT NULL CHECK (input_tokens > 0),
  max_output_tokens  INTEGER NOT NULL CHECK (max_output_tokens > 0)
);

-- Page metadata, shared with the Flask side: `authority` says who may serve a page.
CREATE TABLE context_pages (
  page_id          TEXT PRIMARY KEY,
  authority        TEXT NOT NULL CHECK (authority IN ('roleplay', 'managed')),
  principal        TEXT NOT NULL,
  session_id       TEXT NOT NULL,
  policy_revision  INTEGER NOT NULL,
  sha256           TEXT NOT NULL,
  byte_length      INTEGER NOT NULL,
  r2_key           TEXT NOT NULL,
  created_at       INTEGER NOT NULL,
  expires_at       INTEGER NOT NULL,
  signature        TEXT NOT NULL
);
-- Covers "active bytes of (principal, session)": SUM(byte_length) WHERE expires_at > now.
CREATE INDEX context_pages_active
  ON context_pages (principal, session_id, expires_at, byte_length);
