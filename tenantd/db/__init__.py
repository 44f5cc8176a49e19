"""Database layer: aiopg pool, SQLAlchemy Core tables as the query builder, migrations."""

from tenantd.db.core import Conn, Database, Row

__all__ = ["Conn", "Database", "Row"]
