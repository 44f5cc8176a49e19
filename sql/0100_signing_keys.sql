-- Access-token signing keys (issue 14): every instance signs with the same key and reads the
-- same public keys, so they live here. The private key is AES-GCM encrypted under a key
-- derived from SECRET_KEY (HKDF); the public key is the JWK `GET /.well-known/jwks.json`
-- serves. A key's state follows from its timestamps, so no instance has to write a state
-- change when time passes (a next key becomes current at `signing_from` everywhere at once):
--   next     published_at <= now < signing_from
--   current  signing_from <= now and (retired_at IS NULL or now < retired_at)
--   retired  retired_at <= now: signs nothing; published (and trusted) until not_after,
--            when the last token it signed has expired; private_key is wiped by the sweep.
-- Every change NOTIFYs tenantd_keys so each instance reloads its keyring at once.

CREATE TABLE signing_keys (
    kid text PRIMARY KEY,
    alg text NOT NULL CHECK (alg IN ('EdDSA', 'ES256')),
    public_jwk jsonb NOT NULL,
    private_key bytea,
    published_at timestamptz NOT NULL DEFAULT now(),
    signing_from timestamptz NOT NULL,
    retired_at timestamptz,
    not_after timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (signing_from >= published_at),
    CHECK (not_after IS NULL OR (retired_at IS NOT NULL AND not_after >= retired_at))
);

CREATE INDEX signing_keys_signing_from_idx ON signing_keys (signing_from);

CREATE FUNCTION tenantd_keys_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tenantd_keys', '');
    RETURN NULL;
END $$;

CREATE TRIGGER signing_keys_changed AFTER INSERT OR UPDATE OR DELETE ON signing_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tenantd_keys_changed();
