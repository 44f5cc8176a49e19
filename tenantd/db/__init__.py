"""Database layer: aiopg pool, SQLAlchemy Core tables as the query builder, migrations."""

from tenantd.db.core import DATABASE, Conn, Database, Row

__all__ = ["DATABASE", "Conn", "Database", "Row"]
