-- harvest queue schema, version 10: a token's expiry (Unix ms; 0: never,
-- every token made before this version and the sites' tokens).
ALTER TABLE tokens ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
