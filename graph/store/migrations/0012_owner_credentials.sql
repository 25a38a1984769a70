-- per-owner secrets of tools (API tokens, account passwords), encrypted at rest with Fernet
CREATE TABLE owner_credentials (
    owner_id    text        NOT NULL,
    tool        text        NOT NULL,
    name        text        NOT NULL,
    ciphertext  bytea       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, tool, name)
);
