"""Auth test fixtures: the probe server, no abuse limiter and a cheap argon2id, all
defined in tests/identity/probes.py."""

from tests.identity.probes import cheap_argon2, env, server

__all__ = ["cheap_argon2", "env", "server"]
