"""Schemathesis against /api/v1/openapi.json of a real `tenantd serve`: no 5xx, every status,
content type, header and body as documented. Bounded (a few examples per operation) and
derandomized, so a run is reproducible and short.

Every case carries a fresh signed-in session (a case may log out or cut every session off),
so authenticated operations are exercised past the guard.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import schemathesis
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tenantd.apikeys import service as apikeys
from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.settings import Settings
from tenantd.web.openapi import build_openapi
from tenantd.web.routing import ROUTE_SPEC, path_params
from tenantd.web.schemas import (
    MULTILINE_PATTERN,
    SINGLE_LINE_PATTERN,
    MultilineText,
    RequestBody,
)
from tenantd.web.spec import Access, Routes
from tests.factories import Factory, UserRecord
from tests.helpers import ORIGIN, SECRET
from tests.ops.servers import REPO, TENANTD, Server, process_env, server_env, start_server

T = TypeVar("T")

# The spawned server's settings beyond server_env's; the in-process document is built with
# the same ones, so a route that depends on a setting is in both or in neither.
FUZZ_SETTINGS = {
    "NOTIFICATIONS_SSE_ENABLED": "true",
    "TENANTD_SCHEDULER_ENABLED": "false",
    "RATE_LIMIT_ENABLED": "false",  # reach the views; limits have their own tests
    "LOG_LEVEL": "error",
}
# The interpreter the venv's `tenantd` script runs (its shebang), as a spawned server does.
TENANTD_PYTHON = Path(TENANTD).read_text().splitlines()[0].removeprefix("#!").strip()

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,
]


class Background:
    """An event loop in a thread, so sync schemathesis tests can use the async factory."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Sessions:
    def __init__(self, factory: Factory, background: Background, user: UserRecord):
        self.factory = factory
        self.background = background
        self.user = user

    def cookie_header(self) -> str:
        cookies = self.background.run(self.factory.cookies(self.user))
        return "; ".join(f"{name}={value}" for name, value in cookies.items())


def wait_ready(server: Server, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert server.process.poll() is None, server.log()
        try:
            with urllib.request.urlopen(server.url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(server.log())


@pytest.fixture(scope="module")
def fuzz_server(migrated: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory: Path = tmp_path_factory.mktemp("fuzz")
    env = server_env(migrated, directory, SECRET, **FUZZ_SETTINGS)
    server = start_server("fuzz", env, directory)
    try:
        wait_ready(server)
        yield server.url
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture(scope="module")
def sessions(migrated: str, fuzz_server: str) -> Iterator[Sessions]:
    background = Background()
    db = background.run(create_database(url_to_dsn(migrated), minsize=1, maxsize=2))
    factory = Factory(db, load_settings(environ={"SECRET_KEY": SECRET}))
    user = background.run(factory.user(plan="team"))
    try:
        yield Sessions(factory, background, user)
    finally:
        background.run(db.close())
        background.close()


def local_document() -> dict[str, Any]:
    """The document the server serves, built from the same route table in this process, with
    the server's own settings (schemathesis' lazy fixture loader does not work with this
    pytest; a test below checks the served document is this one)."""
    environ = server_env("postgresql:///unused", Path("unused"), SECRET, **FUZZ_SETTINGS)
    app = create_app(load_settings(environ=environ), environ["DATABASE_URL"])
    return build_openapi(app[ROUTE_SPEC])


DOCUMENT = local_document()
schema = schemathesis.openapi.from_dict(DOCUMENT)
# Valid and invalid inputs: invalid ones must be refused with a documented 4xx, never a 5xx.
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


def test_served_document_is_the_fuzzed_one(fuzz_server: str) -> None:
    with urllib.request.urlopen(fuzz_server + "/api/v1/openapi.json", timeout=30) as response:
        served = json.loads(response.read())
    missing = sorted(set(DOCUMENT["paths"]) - set(served["paths"]))
    extra = sorted(set(served["paths"]) - set(DOCUMENT["paths"]))
    assert (missing, extra) == ([], []), "the spawned server runs other routes"
    assert served == DOCUMENT


def test_a_spawned_server_runs_this_checkout() -> None:
    """The venv's `tenantd` is an editable install of whichever checkout installed it; a
    spawned server must import this one (or it serves another route table)."""
    found = subprocess.run(
        [TENANTD_PYTHON, "-c", "import tenantd; print(tenantd.__file__)"],
        env=process_env({}),
        cwd=Path(tempfile.gettempdir()),
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(found.stdout.strip()) == REPO / "tenantd" / "__init__.py"


@pytest.mark.slow
@schema.exclude(path="/api/v1/notifications/stream").parametrize()
# Under pytest 9, schemathesis 4.32 gives every operation's item one node id unless the test
# is parametrized too (the operation's label then joins the id): xdist needs unique ids.
@pytest.mark.parametrize("credential", ["session"])
@settings(
    max_examples=8,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_matches_its_openapi_document(
    case: Any, credential: str, fuzz_server: str, sessions: Sessions
) -> None:
    headers = {"Origin": ORIGIN}
    if case.operation.definition.raw.get("security") and credential == "session":
        headers["Cookie"] = sessions.cookie_header()
    response = case.call(base_url=fuzz_server, headers=headers, timeout=10)
    case.validate_response(response, checks=CHECKS)


# --- hostile text: control characters in every place a client can put a string -------------

# NUL (PostgreSQL refuses it in text), a line break and a tab in single-line text, ESC.
CONTROLS = ["\x00", "\n", "\t", "\x1b"]


def string_leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from string_leaves(item, (*path, key))


def with_control(value: Any, path: tuple[str, ...], control: str) -> Any:
    if not path:
        return value[:1] + control + value[1:]
    return {**value, path[0]: with_control(value[path[0]], path[1:], control)}


def concrete(path: str, **values: str) -> str:
    """A path template with its parameters filled in (random ids unless given)."""
    for name in path_params(path):
        path = path.replace(f"{{{name}}}", values.get(name, str(uuid.uuid4())))
    return path


async def refused_fields(response: Any) -> dict[str, str]:
    payload = await response.json()
    assert response.status == 422, payload
    assert payload["error"]["code"] == "VALIDATION_ERROR", payload
    fields: dict[str, str] = payload["error"]["details"]["fields"]
    return fields


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    # Reach the validators: a refused body counts against the rate limit too (it is counted
    # before the body is judged), and these tests send hundreds of them; limits have their own.
    env["RATE_LIMIT_ENABLED"] = "false"
    return env


@pytest.fixture
async def signed_in(make_client: Any, factory: Any) -> Any:
    return await make_client(cookies=await factory.cookies(await factory.user()))


@pytest.fixture
async def server_key(db: Database) -> dict[str, str]:
    """An API key with every scope, for the server routes (their guard runs first)."""
    async with db.connection() as conn:
        created = await apikeys.create_key(
            conn,
            secret_key=SECRET,
            name="fuzz",
            scopes=list(apikeys.SCOPES),
        )
    return {"Authorization": f"Bearer {created.token}"}


def key_for(operation: dict[str, Any], key: dict[str, str]) -> dict[str, str] | None:
    return key if "apiKeyAuth" in json.dumps(operation.get("security", [])) else None


async def test_control_characters_in_any_body_field_are_422(signed_in: Any) -> None:
    """Each documented request example, with a control character put into each of its
    strings in turn (emails, passwords, names, account names, tokens, event types, push
    endpoints and keys): 422 naming that field, never a 5xx or an accepted request."""
    document = await (await signed_in.get("/api/v1/openapi.json")).json()
    tried: set[str] = set()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is None:
                continue
            name = body["schema"]["$ref"].rsplit("/", 1)[-1]
            for example in document["components"]["schemas"][name].get("examples", []):
                for leaf in string_leaves(example):
                    for control in CONTROLS:
                        response = await signed_in.request(
                            method.upper(),
                            concrete(path),
                            json=with_control(example, leaf, control),
                        )
                        fields = await refused_fields(response)
                        assert ".".join(leaf) in fields, (path, leaf, control, fields)
                    tried.add(f"{name}.{'.'.join(leaf)}")
    assert {
        "RegisterBody.email",
        "RegisterBody.password",
        "RegisterBody.firstName",
        "RegisterBody.lastName",
        "LoginBody.password",
        "AccountCreate.name",
        "AccountRename.name",
        "InvitationCreate.email",
        "PreferenceBody.eventType",
        "PushSubscribeBody.endpoint",
        "PushSubscribeBody.keys.p256dh",
        "VerifyEmailBody.token",
    } <= tried


async def test_control_characters_in_query_parameters_are_422(
    signed_in: Any, server_key: dict[str, str]
) -> None:
    document = await (await signed_in.get("/api/v1/openapi.json")).json()
    tried = set()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for param in operation.get("parameters", []):
                schema = param["schema"]
                texts = [schema, *schema.get("anyOf", [])]
                if param["in"] != "query" or not any(
                    s.get("type") == "string" and "enum" not in s for s in texts
                ):
                    continue
                for control in CONTROLS:
                    response = await signed_in.request(
                        method.upper(),
                        concrete(path, provider="fake"),
                        params={param["name"]: f"a{control}b"},
                        allow_redirects=False,
                        headers=key_for(operation, server_key),
                    )
                    assert param["name"] in await refused_fields(response), (path, control)
                tried.add(param["name"])
    assert {"cursor", "token", "returnTo", "code", "state"} <= tried


async def test_control_characters_in_path_parameters_are_422(
    signed_in: Any, server_key: dict[str, str]
) -> None:
    document = await (await signed_in.get("/api/v1/openapi.json")).json()
    tried = set()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for name in path_params(path):
                for control in ("%00", "%0A", "%09", "%1B"):
                    response = await signed_in.request(
                        method.upper(),
                        concrete(path, **{name: f"a{control}b"}),
                        headers=key_for(operation, server_key),
                    )
                    assert name in await refused_fields(response), (method, path, control)
                tried.add(f"{method} {path} {name}")
    assert "post /api/v1/notifications/{id}/read id" in tried
    assert "delete /api/v1/auth/oauth/{provider} provider" in tried


probe = Routes("test")


class Note(RequestBody):
    title: str
    text: MultilineText
    tags: list[str] = []


@probe.post("/test/notes", access=Access.PUBLIC, body=Note)
async def echo_note(request: web.Request, body: Note) -> dict[str, Any]:
    return body.model_dump(by_alias=True)


@pytest.fixture
async def notes(db: Database, settings: Settings, migrated: str, aiohttp_client: Any) -> Any:
    app = create_app(settings, migrated, extra_routes=[probe])
    return await aiohttp_client(TestServer(app))


async def test_multiline_text_keeps_tabs_and_line_breaks_and_nothing_else(notes: Any) -> None:
    note: dict[str, Any] = {"title": "Plan", "text": "line one\n\tindented\r\nend", "tags": ["a"]}
    response = await notes.post("/test/notes", json=note)
    assert response.status == 200
    assert (await response.json())["data"] == note
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"title": "a\nb"}, "title"),
        ({"title": "a\tb"}, "title"),
        ({"text": "a\x00b"}, "text"),
        ({"text": "a\x0bb"}, "text"),  # vertical tab is not a line break here
        ({"text": "a\x1b[31mb"}, "text"),
        ({"tags": ["ok", "a\x00"]}, "tags"),
    ]
    for refused, field in refusals:
        fields = await refused_fields(await notes.post("/test/notes", json={**note, **refused}))
        assert fields == {field: "must not contain control characters"}
    schema = Note.model_json_schema()["properties"]
    assert schema["text"]["pattern"] == MULTILINE_PATTERN
    assert schema["title"]["pattern"] == schema["tags"]["items"]["pattern"] == SINGLE_LINE_PATTERN
