"""Tenancy: accounts, memberships, invitations, plans and features, domain claims, sweeps."""
