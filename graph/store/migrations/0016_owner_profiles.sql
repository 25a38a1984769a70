-- per-owner profiles: the timezone, locale and name every surface uses for that owner
-- A missing field falls back to the caller's token claims (OIDC zoneinfo, locale, name), then to
-- the server's defaults. GRANTs reach this table through the schema's default privileges (0003).
CREATE TABLE owner_profiles (
    owner_id text PRIMARY KEY,
    display_name text CHECK (length(display_name) <= 200),
    timezone text CHECK (length(timezone) <= 64),
    locale text CHECK (locale ~ '^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8}){0,3}$'),
    updated_at timestamptz NOT NULL DEFAULT now()
);
