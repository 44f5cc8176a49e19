"""What other services use to trust tenantd's sessions: the JWKS and token introspection."""
