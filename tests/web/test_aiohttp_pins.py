"""The pin of tenantd/web/aiohttp_pins.py holds: the installed aiohttp is in its range, every
private name it uses is still there, `JsonResponse` sets all the state `web.Response` sets, the
envelope reaches routed and unmatched requests, and no other module of tenantd touches a
private name of a library (aiopg's stay in tenantd/db/core.py)."""

from __future__ import annotations

import ast
import importlib
import tomllib
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tenantd.web import aiohttp_pins
from tenantd.web.aiohttp_pins import PRIVATE_NAMES, SUPPORTED, JsonResponse
from tenantd.web.middlewares import envelope_routes

ROOT = Path(__file__).resolve().parents[2]

# Modules allowed a library's private names: the pinned ones, each with tests of its names.
PINNED_MODULES = {
    "tenantd/web/aiohttp_pins.py",  # aiohttp (this file's tests)
    "tenantd/db/core.py",  # aiopg (tests/db/test_roundtrip.py pins its version)
    # Moved by the homes/jobs change (the jobs rewrite can take Database.dsn): remove then.
    "tenantd/jobs/runner.py",
}
# Typer vendors Click and exposes it only as `typer._click` (typer 0.29): the CLI's lazy
# group and its usage errors need its Command, Context and exception classes.
VENDORED = {"typer._click"}


def test_the_installed_aiohttp_is_in_the_pinned_range() -> None:
    assert Version(aiohttp.__version__) in SpecifierSet(SUPPORTED)


def test_pyproject_bounds_aiohttp_to_the_pinned_range() -> None:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    (aiohttp_requirement,) = [
        Requirement(line) for line in dependencies if Requirement(line).name == "aiohttp"
    ]
    assert aiohttp_requirement.specifier == SpecifierSet(SUPPORTED)


def _owner(dotted: str) -> object:
    module, _, attribute = dotted.rpartition(".")
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError:
        return getattr(importlib.import_module(module), attribute)


def _instance_names(owner: object) -> set[str]:
    """Names an instance of `owner` has once built (class attributes and what __init__ sets)."""
    if owner is web.Response or owner is web.StreamResponse:
        instance: object = owner()
    elif owner is web.BaseRequest:
        instance = make_mocked_request("GET", "/")
    elif owner is web.ResourceRoute:

        async def handler(request: web.Request) -> web.Response:
            return web.Response()

        instance = web.UrlDispatcher().add_get("/x", handler)
    else:
        return set(dir(owner))
    return set(dir(instance)) | set(getattr(instance, "__dict__", {}))


@pytest.mark.parametrize(("owner", "name"), PRIVATE_NAMES)
def test_each_private_name_is_still_there(owner: str, name: str) -> None:
    assert name in _instance_names(_owner(owner)), f"{owner}.{name} is gone: see aiohttp_pins"


def test_the_json_response_sets_what_web_response_sets() -> None:
    """A new attribute in aiohttp's Response.__init__ would be missing from JsonResponse."""
    body = b'{"a":1}'
    ours = JsonResponse(body, status=201, headers={"X-Request-ID": "r"})
    theirs = web.Response(
        body=body, status=201, headers={"X-Request-ID": "r"}, content_type="application/json"
    )
    missing = {
        name
        for name, value in vars(theirs).items()
        if name not in vars(ours) and getattr(type(ours), name, object()) != value
    }
    assert missing == set()


async def test_the_envelope_reaches_routed_and_unmatched_requests() -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/hello", hello)
    envelope_routes(app)
    async with TestClient(TestServer(app)) as client:
        routed = await client.get("/hello")
        missing = await client.get("/nowhere")
        not_allowed = await client.post("/hello")
        for answer in (routed, missing, not_allowed):
            assert answer.headers["X-Request-ID"]
        assert (await missing.json())["error"]["code"] == "NOT_FOUND"
        assert (await not_allowed.json())["error"]["code"] == "METHOD_NOT_ALLOWED"
        assert not_allowed.headers["Allow"] == "GET, HEAD"


def _private_uses(source: str) -> list[tuple[int, str]]:
    """`x._name` on anything but self/cls, and imports of `_private` modules or names."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if node.attr.startswith("__") or node.attr == "_exit":
                continue  # dunders; os._exit is documented public API
            if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                continue
            found.append((node.lineno, f"._{node.attr.lstrip('_')}"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [alias.name for alias in node.names]
            if node.module.startswith("tenantd"):
                continue
            dotted = [f"{node.module}.{name}" for name in names]
            private = [
                d
                for d in dotted
                if any(p.startswith("_") and p != "__future__" for p in d.split("."))
            ]
            found += [(node.lineno, d) for d in private if not d.startswith(tuple(VENDORED))]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if any(p.startswith("_") for p in alias.name.split(".")):
                    found.append((node.lineno, alias.name))
    return found


def test_no_other_module_uses_a_library_private_name() -> None:
    used = [
        f"{relative}:{line}: {what}"
        for path in sorted((ROOT / "tenantd").rglob("*.py"))
        if (relative := path.relative_to(ROOT).as_posix()) not in PINNED_MODULES
        for line, what in _private_uses(path.read_text())
    ]
    assert used == []


def test_the_scan_sees_private_names() -> None:
    source = (
        "from aiohttp import web\nfrom typer import _click\nfrom a._b import c\n"
        "import x._y\nroute._handler = 1\nself._ok = 2\nos._exit(0)\n"
    )
    assert _private_uses(source) == [(3, "a._b.c"), (4, "x._y"), (5, "._handler")]


def test_the_module_says_what_it_exports() -> None:
    assert set(aiohttp_pins.__all__) <= set(vars(aiohttp_pins))
