-- Plug-in tools' own migrations: which step of which tool is applied, and its digest.
CREATE TABLE IF NOT EXISTS tool_migrations (
    tool        text        NOT NULL,
    step        integer     NOT NULL,
    digest      text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tool, step)
);
