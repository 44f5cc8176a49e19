"""Request-context cache: resolved principals and /me bodies, invalidated over NOTIFY."""
