"""docs/scaling.md's Citus chapter places every table: its table lists exactly the tables of
tenantd/db/tables.py (the schema the migrations in sql/ build), each with a known class and,
when distributed, its distribution column and co-location group."""

from __future__ import annotations

import re
from pathlib import Path

from tenantd.db.tables import metadata

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "## Past one primary: sharding with Citus"
HEADER = ["table", "class", "distribution column", "group", "keys and constraints that change"]
CLASSES = {
    "distributed by `account_id`": "A",
    "distributed by `user_id`": "U",
    "distributed by its key": None,  # group E or K
    "reference table": "—",
    "stays local on the coordinator": "—",
}


def chapter(text: str) -> str:
    """The chapter's text, up to the next second-level heading."""
    assert CHAPTER in text, f"docs/scaling.md has no '{CHAPTER}'"
    rest = text.split(CHAPTER, 1)[1]
    return re.split(r"^## ", rest, maxsplit=1, flags=re.MULTILINE)[0]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def table_rows(text: str, header: list[str]) -> list[list[str]]:
    """The body rows of the first markdown table whose header row is `header`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and cells(line) == header:
            rows = []
            for body in lines[i + 2 :]:
                if not body.startswith("|"):
                    break
                rows.append(cells(body))
            return rows
    raise AssertionError(f"no table with the header {header}")


def placed() -> dict[str, list[str]]:
    text = chapter((ROOT / "docs" / "scaling.md").read_text())
    rows = table_rows(text, HEADER)
    names: dict[str, list[str]] = {}
    for row in rows:
        assert len(row) == len(HEADER), row
        match = re.fullmatch(r"`([a-z_]+)`", row[0])
        assert match, f"the first cell names one table in backticks: {row[0]!r}"
        assert match.group(1) not in names, f"{match.group(1)} is listed twice"
        names[match.group(1)] = row
    return names


def test_every_table_of_the_schema_is_placed_once() -> None:
    names = placed()
    schema = set(metadata.tables)
    missing = sorted(schema - set(names))
    unknown = sorted(set(names) - schema)
    assert not missing, f"tables of tenantd/db/tables.py missing from docs/scaling.md: {missing}"
    assert not unknown, f"docs/scaling.md places tables that do not exist: {unknown}"


def test_each_placement_names_its_class_column_and_group() -> None:
    for name, (_, klass, column, group, change) in placed().items():
        assert klass in CLASSES, (name, klass)
        expected_group = CLASSES[klass]
        if klass.startswith("distributed"):
            assert re.fullmatch(r"`[a-z_]+`( \(added\))?", column), (name, column)
            table = metadata.tables[name]
            added = column.endswith("(added)")
            assert added or column.split("`")[1] in table.c, (name, column)
            if expected_group is None:
                assert group in ("E", "K"), (name, group)
            else:
                assert group == expected_group, (name, group)
        else:
            assert (column, group) == ("—", "—"), (name, column, group)
        assert change, f"{name}: say what changes (or 'none')"


def test_the_parser_sees_a_missing_table() -> None:
    """The check can fail: a chapter without one of the rows is caught."""
    text = (ROOT / "docs" / "scaling.md").read_text()
    without = "\n".join(
        line for line in text.splitlines() if not line.startswith("| `memberships` |")
    )
    rows = table_rows(chapter(without), HEADER)
    assert "`memberships`" not in {row[0] for row in rows}
    assert "`memberships`" in {row[0] for row in table_rows(chapter(text), HEADER)}
