"""SQL lives in the `queries.py` of the package that owns it (tenantd/db/ aside): a statement
written as a string anywhere else, a SQLAlchemy statement built elsewhere, or a Core table
imported elsewhere (conditions over its columns are SQL too) fails here.

The check reads the source with `ast`, so docstrings and comments that quote SQL are fine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tenantd"

# A string that starts like a statement (keywords upper case, as every query here is written).
STATEMENT = re.compile(
    r"""^\s*(
        SELECT\s | INSERT\s+INTO\s | UPDATE\s+\w+(\s+(AS\s+)?\w+)?\s+SET\s | DELETE\s+FROM\s
      | WITH\s+(RECURSIVE\s+)?\w+(\s*\([^)]*\))?\s+AS\s | TRUNCATE\s | LOCK\s+TABLE\s
      | (UN)?LISTEN\s | NOTIFY\s | SET\s+(LOCAL|SESSION)\s
      | (CREATE|DROP|ALTER)\s+(TABLE|INDEX|FUNCTION|TRIGGER|EXTENSION|SCHEMA)\s
    )""",
    re.VERBOSE,
)
# SQLAlchemy's statement builders.
BUILDERS = {"select", "insert", "update", "delete", "text", "union", "union_all", "exists"}

# Moved by the homes/jobs change: these modules (and their SQL) go to their domains' homes in
# a parallel change; the lead removes this allowance after that merge.
ALLOWED: tuple[str, ...] = ()


def exempt(relative: str) -> bool:
    return (
        relative.endswith("/queries.py")
        or relative.startswith("tenantd/db/")
        or relative.startswith(ALLOWED)
    )


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _leading_text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's with each placeholder as `x`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) else "x" for part in node.values
        )
    return None


def sql_outside_home(source: str) -> list[tuple[int, str]]:
    """(line, what) for each statement, builder call or table import in `source`."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    builders: set[str] = set()
    modules: set[str] = set()
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("sqlalchemy"):
                builders |= {a.asname or a.name for a in node.names if a.name in BUILDERS}
            if node.module == "tenantd.db.tables" or (
                node.module == "tenantd.db" and any(a.name == "tables" for a in node.names)
            ):
                found.append((node.lineno, "imports tenantd.db.tables"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sqlalchemy"):
                    modules.add(alias.asname or alias.name)
                if alias.name == "tenantd.db.tables":
                    found.append((node.lineno, "imports tenantd.db.tables"))
        elif isinstance(node, ast.JoinedStr):
            skip |= {id(part) for part in node.values}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        text = _leading_text(node)
        if text is not None and STATEMENT.match(text):
            found.append((getattr(node, "lineno", 0), text.strip().splitlines()[0][:60]))
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in builders:
                found.append((node.lineno, f"{func.id}(...)"))
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in modules
                and func.attr in BUILDERS
            ):
                found.append((node.lineno, f"{func.value.id}.{func.attr}(...)"))
    return sorted(found)


def test_sql_lives_in_queries_modules() -> None:
    stray = [
        f"{relative}:{line}: {what}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not exempt(relative := path.relative_to(ROOT).as_posix())
        for line, what in sql_outside_home(path.read_text())
    ]
    assert stray == [], "SQL outside queries.py:\n" + "\n".join(stray)


def test_allowance_names_existing_paths() -> None:
    """An allowance for a path that has gone (moved by the homes/jobs change) is dropped."""
    assert [p for p in ALLOWED if not (ROOT / p).exists()] == []


def test_the_scan_sees_each_kind_of_sql() -> None:
    source = '''
"""SELECT in a docstring is prose."""
import sqlalchemy as sa
from sqlalchemy import select
from tenantd.db.tables import users

A = "SELECT id FROM users WHERE id = %(u)s"
B = f"""
WITH t AS (SELECT 1) DELETE FROM users WHERE id IN (SELECT * FROM t) -- {A}
"""
C = "; ".join(f"LISTEN {c}" for c in "ab")

def f():
    """UPDATE the docs, not a table."""
    return select(users), sa.delete(users), "Select a plan", "UPDATE users SET x = 1"
'''
    found = [(line, what.split()[0]) for line, what in sql_outside_home(source)]
    assert found == [
        (5, "imports"),
        (7, "SELECT"),
        (8, "WITH"),
        (11, "LISTEN"),
        (15, "UPDATE"),
        (15, "sa.delete(...)"),
        (15, "select(...)"),
    ]
