"""The audit trail: one writer of audit rows (hash-chained per account) and of per-user
security events, below every domain that records them."""
