-- Custom roles (issue 30 part 3): per account, roles beside the system roles owner, admin and
-- member, each a set of permission strings (docs/roles.md). The system roles are not rows:
-- their permissions are fixed in tenantd/identity/permissions.py.
-- memberships.role and invitations.role may now name a custom role of their account; the
-- one-owner index is untouched, and no custom role is ever called owner, admin or member.
CREATE TABLE account_roles (
    account_id   uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    key          text NOT NULL CHECK (key ~ '^[a-z][a-z0-9_-]{0,62}$'
                                      AND key NOT IN ('owner', 'admin', 'member')),
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    permissions  text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, key)
);

ALTER TABLE memberships DROP CONSTRAINT memberships_role_check;
ALTER TABLE invitations DROP CONSTRAINT invitations_role_check;
ALTER TABLE invitations ADD CONSTRAINT invitations_role_check CHECK (role <> 'owner');

-- The backstop of the service's checks (made under the account lock): a membership or an
-- invitation names a system role or a role of its own account, and a role in use stays.
CREATE FUNCTION tenantd_role_exists() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.role IN ('owner', 'admin', 'member') THEN
        RETURN NEW;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM account_roles r
                    WHERE r.account_id = NEW.account_id AND r.key = NEW.role) THEN
        RAISE EXCEPTION 'role % is not a role of account %', NEW.role, NEW.account_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER memberships_role_exists BEFORE INSERT OR UPDATE OF role ON memberships
    FOR EACH ROW EXECUTE FUNCTION tenantd_role_exists();
CREATE TRIGGER invitations_role_exists BEFORE INSERT OR UPDATE OF role ON invitations
    FOR EACH ROW EXECUTE FUNCTION tenantd_role_exists();

CREATE FUNCTION tenantd_role_unused() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM accounts a WHERE a.id = OLD.account_id)
       AND (EXISTS (SELECT 1 FROM memberships m
                     WHERE m.account_id = OLD.account_id AND m.role = OLD.key
                       AND m.revoked_at IS NULL)
            OR EXISTS (SELECT 1 FROM invitations i
                        WHERE i.account_id = OLD.account_id AND i.role = OLD.key
                          AND i.accepted_at IS NULL AND i.revoked_at IS NULL)) THEN
        RAISE EXCEPTION 'role % of account % is in use', OLD.key, OLD.account_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN OLD;
END $$;

CREATE TRIGGER account_roles_unused BEFORE DELETE ON account_roles
    FOR EACH ROW EXECUTE FUNCTION tenantd_role_unused();

-- A role's permissions are part of every cached principal and /me body of the account.
CREATE TRIGGER account_roles_cache AFTER INSERT OR UPDATE OR DELETE ON account_roles
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_account_row();
