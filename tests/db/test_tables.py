"""tenantd/db/tables.py describes the migrated schema exactly: tables, columns (type and
nullability), primary keys and indexes (columns, order, uniqueness, partial WHERE).

When a migration lands, `test_tables_match_the_migrated_schema` names every table, column and
index that tables.py gets wrong; fix tables.py until it lists none.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg2 as pg_dialect
from sqlalchemy.engine import Inspector

from tenantd.db import Database
from tenantd.db.core import compile_statement, new_id
from tenantd.db.dsn import url_to_dsn
from tenantd.db.tables import metadata, users

_DIALECT = pg_dialect.dialect()

# {table: {"columns": {name: (type, nullable)}, "primary key": [...], "indexes": {name: ...}}}
Schema = dict[str, dict[str, Any]]


def _where(clause: Any) -> str | None:
    """A partial index's predicate in a form both spellings share: PostgreSQL prints it with
    parentheses and ::text casts that the migrations (and tables.py) leave out."""
    if clause is None:
        return None
    text = re.sub(r"[()]", " ", re.sub(r"::text(\[\])?", "", str(clause))).lower()
    return " ".join(text.split()).replace(" ,", ",")


def _element(table: sa.Table, expr: Any) -> str:
    """One index element as `name`, `name DESC` or `lower(name)`."""
    if isinstance(expr, sa.Column):
        return str(expr.name)
    if isinstance(expr, str):
        return expr
    sql = str(expr.compile(dialect=_DIALECT, compile_kwargs={"literal_binds": True}))
    return sql.replace(f"{table.name}.", "")


def describe_metadata(meta: sa.MetaData) -> Schema:
    """The schema tables.py declares."""
    schema: Schema = {}
    for table in meta.tables.values():
        indexes: dict[str, tuple[Any, ...]] = {}
        for index in table.indexes:
            where = index.dialect_options["postgresql"]["where"]
            elements = tuple(_element(table, e) for e in index.expressions)
            indexes[str(index.name)] = (elements, bool(index.unique), _where(where))
        for constraint in table.constraints:
            if isinstance(constraint, sa.UniqueConstraint):
                elements = tuple(c.name for c in constraint.columns)
                indexes[str(constraint.name)] = (elements, True, None)
        schema[table.name] = {
            "columns": {
                c.name: (c.type.compile(dialect=_DIALECT), bool(c.nullable)) for c in table.columns
            },
            "primary key": [c.name for c in table.primary_key.columns],
            "indexes": indexes,
        }
    return schema


def describe_database(inspector: Inspector) -> Schema:
    """The schema the migrations built, as PostgreSQL reports it."""
    schema: Schema = {}
    for name in inspector.get_table_names():
        indexes: dict[str, tuple[Any, ...]] = {}
        for index in inspector.get_indexes(name):
            sorting = index.get("column_sorting", {})
            expressions = index.get("expressions") or index["column_names"]
            elements = tuple(
                f"{e} DESC" if "desc" in sorting.get(str(e), ()) else str(e) for e in expressions
            )
            where = index.get("dialect_options", {}).get("postgresql_where")
            indexes[str(index["name"])] = (elements, bool(index["unique"]), _where(where))
        schema[name] = {
            "columns": {
                c["name"]: (c["type"].compile(dialect=_DIALECT), bool(c["nullable"]))
                for c in inspector.get_columns(name)
            },
            "primary key": list(inspector.get_pk_constraint(name)["constrained_columns"]),
            "indexes": indexes,
        }
    return schema


def _index_text(index: tuple[Any, ...]) -> str:
    elements, unique, where = index
    text = f"{'UNIQUE ' if unique else ''}({', '.join(elements)})"
    return f"{text} WHERE {where}" if where else text


def schema_differences(declared: Schema, live: Schema) -> list[str]:
    """One line per difference, naming the table, column or index (declared = tables.py)."""
    lines: list[str] = []
    for table in sorted(live.keys() - declared.keys()):
        lines.append(f"table {table}: in the database, missing from tables.py")
    for table in sorted(declared.keys() - live.keys()):
        lines.append(f"table {table}: in tables.py, not in the database")
    for table in sorted(declared.keys() & live.keys()):
        want, have = declared[table], live[table]
        for column in have["columns"].keys() - want["columns"].keys():
            type_, nullable = have["columns"][column]
            null = "NULL" if nullable else "NOT NULL"
            lines.append(f"{table}.{column}: missing from tables.py (database: {type_} {null})")
        for column in want["columns"].keys() - have["columns"].keys():
            lines.append(f"{table}.{column}: in tables.py, not in the database")
        for column in want["columns"].keys() & have["columns"].keys():
            (want_type, want_null), (have_type, have_null) = (
                want["columns"][column],
                have["columns"][column],
            )
            if want_type != have_type:
                lines.append(
                    f"{table}.{column}: type {want_type} in tables.py, {have_type} in the database"
                )
            if want_null != have_null:
                lines.append(
                    f"{table}.{column}: nullable={want_null} in tables.py,"
                    f" nullable={have_null} in the database"
                )
        if want["primary key"] != have["primary key"]:
            lines.append(
                f"{table}: primary key {want['primary key']} in tables.py,"
                f" {have['primary key']} in the database"
            )
        for index in have["indexes"].keys() - want["indexes"].keys():
            lines.append(
                f"{table}: index {index} {_index_text(have['indexes'][index])}"
                " missing from tables.py"
            )
        for index in want["indexes"].keys() - have["indexes"].keys():
            lines.append(f"{table}: index {index} in tables.py, not in the database")
        for index in want["indexes"].keys() & have["indexes"].keys():
            if want["indexes"][index] != have["indexes"][index]:
                lines.append(
                    f"{table}: index {index} is {_index_text(want['indexes'][index])}"
                    f" in tables.py, {_index_text(have['indexes'][index])} in the database"
                )
    return sorted(lines)


@pytest.fixture(scope="module")
def live_schema(migrated: str) -> Iterator[Schema]:
    dsn = url_to_dsn(migrated)
    engine = sa.create_engine("postgresql+psycopg2://", creator=lambda: psycopg2.connect(dsn))
    try:
        yield describe_database(sa.inspect(engine))
    finally:
        engine.dispose()


def test_tables_match_the_migrated_schema(live_schema: Schema) -> None:
    differences = schema_differences(describe_metadata(metadata), live_schema)
    assert not differences, "tenantd/db/tables.py differs from sql/:\n" + "\n".join(differences)


def _drifted() -> sa.MetaData:
    copy = sa.MetaData()
    for table in metadata.tables.values():
        table.to_metadata(copy)
    jobs = copy.tables["jobs"]
    jobs.c.finished_at.nullable = False
    jobs.append_column(sa.Column("priority", sa.Integer))
    sessions = copy.tables["sessions"]
    sessions.indexes.discard(next(i for i in sessions.indexes if i.name == "sessions_user_idx"))
    rate_limits = copy.tables["rate_limits"]
    index = next(i for i in rate_limits.indexes if i.name == "rate_limits_window_idx")
    index.unique = True
    copy.remove(copy.tables["sweep_runs"])
    copy.tables["users"].c.email.type = sa.LargeBinary()
    return copy


def test_drift_is_named_table_by_table(live_schema: Schema) -> None:
    differences = schema_differences(describe_metadata(_drifted()), live_schema)
    assert differences == [
        "jobs.finished_at: nullable=False in tables.py, nullable=True in the database",
        "jobs.priority: in tables.py, not in the database",
        "rate_limits: index rate_limits_window_idx is UNIQUE (window_start) in tables.py,"
        " (window_start) in the database",
        "sessions: index sessions_user_idx (user_id) missing from tables.py",
        "table sweep_runs: in the database, missing from tables.py",
        "users.email: type BYTEA in tables.py, TEXT in the database",
    ]


def test_partial_and_expression_indexes_are_compared(live_schema: Schema) -> None:
    declared = describe_metadata(metadata)
    assert declared["users"]["indexes"]["users_email_key"] == (("lower(email)",), True, None)
    assert declared["jobs"]["indexes"]["jobs_ready_idx"] == (
        ("run_at", "id"),
        False,
        "status = 'queued'",
    )
    assert live_schema["notifications"]["indexes"]["notifications_user_created_idx"] == (
        ("user_id", "created_at DESC", "id DESC"),
        False,
        None,
    )


def test_core_statements_compile_for_psycopg2() -> None:
    stmt = sa.select(users.c.id).where(users.c.email == "a@example.com").limit(3)
    sql, params = compile_statement(stmt, None)
    assert "%(email_1)s" in sql and "%(param_1)s" in sql
    assert params == {"email_1": "a@example.com", "param_1": 3}
    # Expanding IN lists are rendered at compile time (render_postcompile).
    sql, params = compile_statement(
        sa.select(users.c.id).where(users.c.email.in_(["a", "b"])), None
    )
    assert "IN (%(email_1_1)s, %(email_1_2)s)" in sql
    assert params == {"email_1_1": "a", "email_1_2": "b"}


async def test_core_statements_run_on_the_pool(db: Database) -> None:
    await db.execute(
        sa.insert(users).values(
            id=new_id(), email="core@example.com", first_name="C", last_name="Ore"
        )
    )
    row = await db.fetch_one(
        sa.select(users.c.email, users.c.first_name).where(users.c.email == "core@example.com")
    )
    assert row == {"email": "core@example.com", "first_name": "C"}
    assert await db.fetch_val(sa.select(sa.func.count()).select_from(users)) == 1
    # Named bind parameters take their values at execution, like raw statements.
    by_email = sa.select(users.c.first_name).where(users.c.email == sa.bindparam("email"))
    assert await db.fetch_val(by_email, {"email": "core@example.com"}) == "C"
    assert await db.fetch_val(by_email, {"email": "nobody@example.com"}) is None
    assert await db.execute(sa.delete(users).where(users.c.email == "core@example.com")) == 1
