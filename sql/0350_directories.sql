-- SCIM 2.0 directory sync per account (issue 30). A directory is one identity provider's
-- connection: its bearer token is shown once and only an HMAC-SHA256 of it (keyed by
-- SECRET_KEY) is kept, like every token tenantd issues.
CREATE TABLE directories (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id    uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name          text NOT NULL DEFAULT '',
    token_hash    bytea NOT NULL,
    created_by    uuid,              -- the owner or admin who made it (null: the CLI)
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz        -- refreshed at most once a minute
);
CREATE INDEX directories_account_idx ON directories (account_id, created_at);

-- A directory's users: the SCIM resource as the provider last wrote it (without id, meta and
-- groups, which tenantd computes), linked to one tenantd user once it has an address (the
-- primary of emails, or a userName that is one; until then user_id is null).
-- `user_name_key` is the comparison form of userName (NFC, lower case).
CREATE TABLE directory_users (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    directory_id   uuid NOT NULL REFERENCES directories(id) ON DELETE CASCADE,
    user_id        uuid REFERENCES users(id) ON DELETE CASCADE,
    user_name      text NOT NULL,
    user_name_key  text NOT NULL,
    external_id    text,
    active         boolean NOT NULL DEFAULT true,
    resource       jsonb NOT NULL,
    version        integer NOT NULL DEFAULT 1,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT directory_users_user_name_key UNIQUE (directory_id, user_name_key),
    CONSTRAINT directory_users_user_key UNIQUE (directory_id, user_id)
);
CREATE INDEX directory_users_external_idx ON directory_users (directory_id, external_id);
CREATE INDEX directory_users_user_idx ON directory_users (user_id);

-- A directory's groups; `role` maps membership of the group to a role key of the account.
CREATE TABLE directory_groups (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    directory_id      uuid NOT NULL REFERENCES directories(id) ON DELETE CASCADE,
    display_name      text NOT NULL,
    display_name_key  text NOT NULL,
    external_id       text,
    role              text,
    resource          jsonb NOT NULL,
    version           integer NOT NULL DEFAULT 1,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX directory_groups_name_idx ON directory_groups (directory_id, display_name_key);
CREATE INDEX directory_groups_external_idx ON directory_groups (directory_id, external_id);

CREATE TABLE directory_group_members (
    group_id   uuid NOT NULL REFERENCES directory_groups(id) ON DELETE CASCADE,
    member_id  uuid NOT NULL REFERENCES directory_users(id) ON DELETE CASCADE,
    display    text,               -- the member's display as the provider wrote it
    PRIMARY KEY (group_id, member_id)
);
CREATE INDEX directory_group_members_member_idx ON directory_group_members (member_id);
