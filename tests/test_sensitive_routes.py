"""Every route of the route table (API and hosted pages) against the list of sensitive
actions (issue 25).

1. Statically: each function that performs a sensitive action (`Sensitive.performed_by`) calls
   `sensitive.require(..., sensitive.<THAT ACTION>)` before it opens any transaction.
2. The call graph (read from the source, module by module) of every route of the one route
   table, API routes and pages alike: a route that reaches a sensitive action must be in
   DRIVEN (so a new route cannot slip by), and every DRIVEN route must reach one.
3. Each DRIVEN route is driven with a session whose sign-in is stale: the API answers 403
   REAUTH_REQUIRED, a page answers 403 with the step-up form, and nothing is written (no
   security event, no audit row, no undo link, no mail).

Removing the guard from any one sensitive action fails (1) for its function and (3) for its
routes; `performed` also refuses to run without the guard (a 500) wherever it is reached.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import importlib
import importlib.util
import inspect
import re
import textwrap
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tenantd.db import Database
from tenantd.identity import stepup
from tenantd.mfa import sensitive
from tenantd.settings import Settings
from tenantd.ui import csrf
from tenantd.web.routing import ROUTE_SPEC
from tenantd.web.spec import RouteSpec
from tests.factories import Factory, read_mails
from tests.mfa.helpers import signed_in

Target = tuple[str, str]  # (module, function)

PERFORMERS: dict[Target, sensitive.Sensitive] = {
    (path.rsplit(".", 1)[0], path.rsplit(".", 1)[1]): action
    for action in sensitive.ACTIONS
    for path in action.performed_by
}
CONSTANT = {v.name: k for k, v in vars(sensitive).items() if isinstance(v, sensitive.Sensitive)}

ACCOUNT = "00000000-0000-4000-8000-0000000000aa"  # replaced by the user's account id
NOBODY = "00000000-0000-4000-8000-000000000001"

# Every route that reaches a sensitive action, with a body the route accepts. The API answers
# 403 REAUTH_REQUIRED to a stale session; a page shows the step-up form (403).
DRIVEN: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/api/v1/auth/mfa/totp/setup"): {},
    ("POST", "/api/v1/auth/mfa/totp/confirm"): {"json": {"code": "123456"}},
    ("DELETE", "/api/v1/auth/mfa/totp"): {},
    ("POST", "/api/v1/auth/mfa/recovery-codes/regenerate"): {},
    ("POST", "/api/v1/auth/passkeys/register/options"): {},
    ("POST", "/api/v1/auth/passkeys/register/verify"): {
        "json": {"credential": {"id": "x", "rawId": "x", "type": "public-key", "response": {}}}
    },
    ("DELETE", "/api/v1/auth/passkeys/{id}"): {"path": {"id": NOBODY}},
    ("POST", "/api/v1/users/me/email"): {"json": {"newEmail": "thief@example.org"}},
    ("DELETE", "/api/v1/users/me"): {},
    ("POST", "/api/v1/auth/password"): {
        "json": {"currentPassword": "x", "newPassword": "a long new passphrase"}
    },
    ("PATCH", "/api/v1/accounts/{id}"): {"path": {"id": ACCOUNT}, "json": {"requireMfa": True}},
    ("DELETE", "/api/v1/accounts/{id}"): {"path": {"id": ACCOUNT}},
    ("POST", "/api/v1/accounts/{id}/restore"): {"path": {"id": ACCOUNT}},
    ("POST", "/api/v1/accounts/{id}/transfer-ownership"): {
        "path": {"id": ACCOUNT},
        "json": {"userId": NOBODY},
    },
    # hosted pages (forms)
    ("POST", "/account/mfa/totp/setup"): {},
    ("POST", "/account/mfa/totp/confirm"): {"form": {"code": "123456"}},
    ("POST", "/account/mfa/totp/disable"): {},
    ("POST", "/account/mfa/recovery-codes"): {},
    ("POST", "/account/passkeys/{pid}/delete"): {"path": {"pid": NOBODY}},
    ("POST", "/account/email"): {"form": {"newEmail": "thief@example.org"}},
    ("POST", "/account/password"): {
        "form": {"currentPassword": "x", "newPassword": "a long new passphrase"}
    },
    ("POST", "/accounts/{id}/transfer"): {"path": {"id": ACCOUNT}, "form": {"userId": NOBODY}},
    ("POST", "/accounts/{id}/delete"): {"path": {"id": ACCOUNT}},
    ("POST", "/accounts/{id}/require-mfa"): {
        "path": {"id": ACCOUNT},
        "form": {"requireMfa": "true"},
    },
    ("POST", "/accounts/{id}/restore"): {"path": {"id": ACCOUNT}},
    ("POST", "/account/delete"): {},  # delete my user (issue 28)
}

# Server routes (an API key, no session) whose service acts as the operator: exempt from
# step-up by design (like the CLI), audited with the key; never reachable with a session.
OPERATOR_ROUTES: set[tuple[str, str]] = {("DELETE", "/api/v1/admin/users/{id}")}


# -- reading the source ---------------------------------------------------------------------


@cache
def module_ast(module: str) -> ast.Module:
    return ast.parse(Path(importlib.import_module(module).__file__ or "").read_text())


@cache
def functions(module: str) -> dict[str, ast.AST]:
    """The module's top-level functions by name."""
    return {
        node.name: node
        for node in module_ast(module).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@cache
def aliases(module: str) -> dict[str, str | Target]:
    """Names the module imported: a module (dotted name) or a function (module, name)."""
    names: dict[str, str | Target] = {}
    for node in ast.walk(module_ast(module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tenantd"):
                    names[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not node.module.startswith("tenantd"):
                continue
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                names[alias.asname or alias.name] = (
                    dotted if is_module(dotted) else (node.module, alias.name)
                )
    return names


def references(module: str, node: ast.AST) -> Iterator[Target]:
    """The tenantd functions a function's body (nested functions and lambdas too) names."""
    local = functions(module)
    imported = aliases(module)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            if sub.id in local:
                yield (module, sub.id)
            elif isinstance(imported.get(sub.id), tuple):
                yield imported[sub.id]  # type: ignore[misc]
        elif (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and isinstance(imported.get(sub.value.id), str)
        ):
            yield (str(imported[sub.value.id]), sub.attr)


def reached(start: Target) -> set[sensitive.Sensitive]:
    """The sensitive actions a function reaches through calls inside tenantd."""
    seen: set[Target] = set()
    todo = [start]
    found: set[sensitive.Sensitive] = set()
    while todo:
        target = todo.pop()
        if target in seen:
            continue
        seen.add(target)
        if target in PERFORMERS:
            found.add(PERFORMERS[target])
            continue
        module, name = target
        if not is_module(module):
            continue
        node = functions(module).get(name)
        if node is not None:
            todo.extend(references(module, node))
    return found


def every_route(app: web.Application) -> list[tuple[str, str, Target]]:
    """(method, path, view function) of every route of the app's one table."""
    return [(spec.method, spec.path, view_of(spec)) for spec in app[ROUTE_SPEC]]


def view_of(spec: RouteSpec) -> Target:
    view = inspect.unwrap(spec.view)  # a form decorator's action
    return (view.__module__, view.__name__)


# -- 1. every performer calls the guard first ------------------------------------------------


def guard_calls(node: ast.AST) -> list[tuple[str, int]]:
    """(action constant, line) of each `sensitive.require(..., sensitive.X)` in a function."""
    calls = []
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "require"
            and isinstance(sub.func.value, ast.Name)
            and sub.func.value.id == "sensitive"
            and len(sub.args) == 3
            and isinstance(sub.args[2], ast.Attribute)
        ):
            calls.append((sub.args[2].attr, sub.lineno))
    return calls


@pytest.mark.parametrize("target", sorted(PERFORMERS), ids=lambda t: f"{t[0]}.{t[1]}")
def test_each_sensitive_action_calls_its_guard_before_any_transaction(target: Target) -> None:
    module, name = target
    node = functions(module).get(name)
    assert node is not None, f"{module}.{name} is listed in sensitive.ACTIONS but does not exist"
    action = PERFORMERS[target]
    calls = [line for constant, line in guard_calls(node) if constant == CONSTANT[action.name]]
    assert calls, f"{module}.{name} performs {action.name} without sensitive.require"
    opened = [sub.lineno for sub in ast.walk(node) if isinstance(sub, ast.AsyncWith)]
    assert not opened or min(calls) < min(opened), (
        f"{module}.{name}: the guard must run before the first transaction"
    )


def test_the_guard_is_the_only_step_up_outside_the_mfa_package() -> None:
    """Views and pages never call the step-up check themselves: it lives in the actions (the
    check itself is identity's rule, tenantd/identity/stepup.py)."""
    root = Path(sensitive.__file__).parents[1]
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "require_recent_auth(" in path.read_text()
        and path.parent.name != "mfa"
        and path != Path(stepup.__file__)
    ]
    assert offenders == []


# -- 2. the call graph of every route --------------------------------------------------------


def test_every_route_that_reaches_a_sensitive_action_is_driven(app: web.Application) -> None:
    reaching = {}
    for method, path, view in every_route(app):
        actions = reached(view)
        if actions:
            reaching[(method, path)] = sorted(a.name for a in actions)
    missing = sorted(set(reaching) - set(DRIVEN) - OPERATOR_ROUTES)
    assert not missing, f"routes reach a sensitive action but are not driven here: {missing}"
    specs = {(s.method, s.path): s for s in app[ROUTE_SPEC]}
    for route in OPERATOR_ROUTES:
        assert route in reaching and specs[route].scope == "users:manage", route
    unreached = sorted(set(DRIVEN) - set(reaching))
    assert not unreached, f"DRIVEN routes that reach no sensitive action: {unreached}"
    # Every sensitive action is reachable from some route (the list names real entry points).
    covered = {name for names in reaching.values() for name in names}
    assert covered == {a.name for a in sensitive.ACTIONS}


def test_the_walk_sees_through_views_and_pages(app: web.Application) -> None:
    """The call-graph reader finds a known chain through a page, a decorator's inner
    function and an alias import (a check of the checker)."""
    table = {(m, p): t for m, p, t in every_route(app)}
    assert reached(table[("POST", "/accounts/{id}/restore")]) == {sensitive.ACCOUNT_RESTORED}
    assert reached(table[("POST", "/accounts/{id}/transfer")]) == {sensitive.OWNERSHIP_TRANSFERRED}
    assert reached(table[("POST", "/api/v1/auth/passkeys/register/verify")]) == {
        sensitive.PASSKEY_ADDED
    }
    assert reached(table[("GET", "/api/v1/auth/mfa/status")]) == set()


def test_every_route_of_the_table_is_walked(app: web.Application) -> None:
    """The app's router holds no route outside the one table the walk reads (the pages are
    in it: a page is a route of the table, with its flags)."""
    assert any(spec.page for spec in app[ROUTE_SPEC])
    known = {(m, re.sub(r"\{(\w+):[^}]+\}", r"{\1}", p)) for m, p, _ in every_route(app)}
    served = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter")
        if route.method in ("HEAD", "OPTIONS", "*") or path is None:
            continue
        if path.startswith("/static/"):
            continue
        served.add((route.method, path))
    assert served - known == set()


# -- 3. driving each route with a stale session ----------------------------------------------


def form_token(settings: Settings, browser_secret: str, action: str) -> str:
    mac = hmac.new(csrf._key(settings.secret_key), digestmod=hashlib.sha256)
    mac.update(browser_secret.encode() + b"\x00" + action.encode())
    return mac.hexdigest()


async def writes(db: Database) -> tuple[int, int, int]:
    row = await db.fetch_one(
        "SELECT (SELECT count(*) FROM security_events) AS e, (SELECT count(*) FROM audit_log)"
        " AS a, (SELECT count(*) FROM security_undo) AS u",
        {},
    )
    assert row is not None
    return int(row["e"]), int(row["a"]), int(row["u"])


@pytest.mark.parametrize("route", sorted(DRIVEN), ids=lambda r: f"{r[0]} {r[1]}")
async def test_a_stale_session_is_refused_on_every_sensitive_route(
    route: tuple[str, str],
    make_client: Any,
    factory: Factory,
    db: Database,
    settings: Settings,
    mail_dir: Path,
) -> None:
    method, template = route
    spec = DRIVEN[route]
    user = await factory.user()
    stale = await signed_in(make_client, db, settings, user, auth_age=3600)
    values = {
        k: (str(user.account_id) if v == ACCOUNT else v) for k, v in spec.get("path", {}).items()
    }
    path = template.format(**values)
    before, mails = await writes(db), len(read_mails(mail_dir))
    if path.startswith("/api/"):
        response = await stale.request(method, path, json=spec.get("json"))
        body = await response.json()
        assert response.status == 403, body
        assert body["error"]["code"] == "REAUTH_REQUIRED"
    else:
        secret = "walk-" + uuid.uuid4().hex
        stale.session.cookie_jar.update_cookies(
            {csrf.CSRF_COOKIE: secret}, response_url=stale.make_url("/")
        )
        form = {"csrf": form_token(settings, secret, path), **spec.get("form", {})}
        response = await stale.request(method, path, data=form, allow_redirects=False)
        page = await response.text()
        assert response.status == 403, textwrap.shorten(page, 400)
        assert 'data-testid="stepup"' in page  # sent to confirm it is them
    assert await writes(db) == before, "a refused sensitive route wrote something"
    assert len(read_mails(mail_dir)) == mails


def test_the_guard_module_lists_what_the_docs_list() -> None:
    """docs/security-actions.md names every action of the list (the reviewer's table)."""
    docs = Path(sensitive.__file__).parents[2] / "docs" / "security-actions.md"
    page = docs.read_text()
    for action in sensitive.ACTIONS:
        assert f"`{action.name}`" in page, action.name
    assert inspect.getsource(sensitive.require)  # the guard exists where the docs say
