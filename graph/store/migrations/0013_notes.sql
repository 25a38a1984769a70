-- the notes tool: free-text notes, archived (soft, reversible) rather than deleted
CREATE TABLE notes (
    id          text PRIMARY KEY,
    owner_id    text        NOT NULL,
    title       text        NOT NULL,
    body        text        NOT NULL DEFAULT '',
    status      text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    archived_at timestamptz
);
CREATE INDEX notes_owner ON notes (owner_id, status, updated_at DESC);
