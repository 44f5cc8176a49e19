"""Admin portal fixtures: the SSO tests' (the portal sets up an account's SSO connections and
directories, so its tests need the same team, browsers and SAML identity provider)."""

from __future__ import annotations

from tests.sso.conftest import cheap_argon2, env, login, make_team, saml_idp, server, team

__all__ = ["cheap_argon2", "env", "login", "make_team", "saml_idp", "server", "team"]
