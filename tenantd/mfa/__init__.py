"""Multi-factor authentication: TOTP, recovery codes, passkeys, sign-in tickets, step-up."""
