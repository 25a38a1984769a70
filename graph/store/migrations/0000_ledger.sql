-- ledger of applied migrations
CREATE TABLE IF NOT EXISTS tollgate_migrations (
    version integer PRIMARY KEY,
    summary text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
