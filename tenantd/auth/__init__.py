"""Authentication: users, passwords, sessions, access tokens, guards and /me."""
