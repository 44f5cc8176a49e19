"""Operators' user administration: the admin API (scope `users:manage`) and its CLI."""
