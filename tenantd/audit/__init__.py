"""The audit trail: one writer of audit rows (hash-chained per account) and of per-user
security events, below every domain that records them."""

from tenantd.audit.log import AuditEntry, record, record_many, record_user

__all__ = ["AuditEntry", "record", "record_many", "record_user"]
