-- Webhook signing secrets at rest are sealed (AES-256-GCM under a key derived from SECRET_KEY,
-- as TOTP secrets are; tenantd/webhooks/secrets.py), bound to their endpoint's id. The clear
-- columns stay only for rows written before this migration: the first instance to start seals
-- them and empties the clear columns (and a row still clear meanwhile is read as it is).
ALTER TABLE webhook_endpoints
    ADD COLUMN secret_sealed bytea,
    ADD COLUMN previous_secret_sealed bytea,
    ALTER COLUMN secret DROP NOT NULL,
    ADD CONSTRAINT webhook_endpoints_secret_present
        CHECK (secret IS NOT NULL OR secret_sealed IS NOT NULL);
