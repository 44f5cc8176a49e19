"""tenantd: accounts, sessions, notifications and email suppression for SaaS apps."""

__version__ = "0.1.0"
