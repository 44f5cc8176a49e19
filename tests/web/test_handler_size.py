"""Views and pages translate: parse, make one service call, answer (STYLE.md habit 3, issue 27).

Every handler of the route table (API routes and hosted pages, each unwrapped from a form
decorator to the function it registers, and the refusal renderer of each form page) is
measured: the lines of its body, not counting its
docstring, blank lines and comment lines. At most BOUND may run over LIMIT lines (none, since
the last two, auth refresh and the invitation page, moved their logic into their services);
a longer handler is a rule living at the door: move it into the service the handler calls.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.web.routing import ROUTE_SPEC

LIMIT = 10
BOUND = 0


def body_lines(function: Callable[..., Any]) -> int:
    """Non-blank, non-comment lines of a function's body, its docstring aside."""
    source = textwrap.dedent(inspect.getsource(function))
    [node] = ast.parse(source).body
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    body = node.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body:
        return 0
    lines = source.splitlines()[body[0].lineno - 1 : node.end_lineno]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def handler_sizes() -> dict[str, int]:
    """'METHOD /path' -> body lines of its handler, for every route of the table (a form
    page's refusal renderer, `again`, is measured as its own handler)."""
    settings = load_settings(environ={"SECRET_KEY": "h" * 32, "TENANTD_DATA_DIR": "/nonexistent"})
    app = create_app(settings, "postgresql:///unused")  # built, never started
    sizes = {}
    for spec in app[ROUTE_SPEC]:
        sizes[spec.name] = body_lines(inspect.unwrap(spec.view))
        if spec.again is not None:
            sizes[f"{spec.name} (again)"] = body_lines(spec.again)
    return sizes


def test_the_measure_reads_bodies() -> None:
    async def short(request: Any) -> int:
        """A docstring is not a line."""
        # nor is a comment
        return 1

    assert body_lines(short) == 1


def test_the_table_holds_api_routes_and_pages() -> None:
    sizes = handler_sizes()
    assert "POST /login" in sizes and "POST /api/v1/auth/login" in sizes
    assert len(sizes) > 150


def test_handlers_stay_short() -> None:
    long = {name: size for name, size in handler_sizes().items() if size > LIMIT}
    listing = "\n".join(f"  {size:3d} {name}" for name, size in sorted(long.items()))
    assert len(long) <= BOUND, f"{len(long)} handlers over {LIMIT} lines:\n{listing}"
