-- Single sign-on connections per account (issue 30 part 1): SAML 2.0 (tenantd is the service
-- provider) or OpenID Connect, each for one or more email domains of the account.

CREATE TABLE sso_connections (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id           uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    type                 text NOT NULL CHECK (type IN ('saml', 'oidc')),
    name                 text NOT NULL DEFAULT '',
    enforce              boolean NOT NULL DEFAULT false,
    default_role         text NOT NULL DEFAULT 'member',
    attribute_mapping    jsonb NOT NULL DEFAULT '{}'::jsonb,
    group_roles          jsonb NOT NULL DEFAULT '{}'::jsonb,
    allow_idp_initiated  boolean NOT NULL DEFAULT false,
    -- SAML: the identity provider, as metadata XML or as its three parts
    idp_metadata_xml     text,
    idp_entity_id        text,
    idp_sso_url          text,
    idp_certificate      text,
    -- OpenID Connect: the client secret is sealed (AES-256-GCM under SECRET_KEY, bound to id)
    issuer               text,
    client_id            text,
    client_secret_sealed bytea,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sso_connections_account_idx ON sso_connections (account_id);

-- A domain belongs to one connection at most: the primary key is the rule, so two racing
-- creations cannot both take it (a soft-deleted account's rows are released by the next
-- taker, under the same key).
CREATE TABLE sso_connection_domains (
    domain         text PRIMARY KEY,
    connection_id  uuid NOT NULL REFERENCES sso_connections(id) ON DELETE CASCADE,
    account_id     uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE
);
CREATE INDEX sso_connection_domains_connection_idx ON sso_connection_domains (connection_id);

-- SP-initiated SAML sign-ins under way: the AuthnRequest id an answer's InResponseTo must
-- name, single use, and the keyed hash of the browser-binding cookie set when it started.
CREATE TABLE sso_saml_requests (
    id             text PRIMARY KEY,
    connection_id  uuid NOT NULL REFERENCES sso_connections(id) ON DELETE CASCADE,
    binding_hash   bytea NOT NULL,
    return_to      text,
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz
);
CREATE INDEX sso_saml_requests_expires_idx ON sso_saml_requests (expires_at);

-- Assertions already used, kept until their NotOnOrAfter: a replay is refused.
CREATE TABLE sso_saml_assertions (
    connection_id  uuid NOT NULL REFERENCES sso_connections(id) ON DELETE CASCADE,
    assertion_id   text NOT NULL,
    expires_at     timestamptz NOT NULL,
    PRIMARY KEY (connection_id, assertion_id)
);
CREATE INDEX sso_saml_assertions_expires_idx ON sso_saml_assertions (expires_at);
