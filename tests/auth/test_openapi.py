"""/api/v1/openapi.json: a valid OpenAPI 3.1 document generated from the route table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import jsonschema_rs
import pytest
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from tenantd.cli.vapid import generate_keys
from tenantd.notifications import registry
from tenantd.notifications.schemas import EVENT_TYPE_PATTERN
from tenantd.web.routing import ROUTE_SPEC, api_routes
from tenantd.web.spec import Access
from tests.auth.oauth.fake_idp import FakeIdP
from tests.helpers import ORIGIN

AUTH_PATHS = {
    ("post", "/auth/register"),
    ("post", "/auth/verify-email"),
    ("post", "/api/v1/auth/resend-verification"),
    ("post", "/api/v1/auth/login"),
    ("post", "/api/v1/auth/logout"),
    ("post", "/api/v1/auth/logout-all"),
    ("post", "/api/v1/auth/password-reset/request"),
    ("post", "/api/v1/auth/password-reset/confirm"),
    ("post", "/api/v1/auth/refresh"),
    ("get", "/api/v1/users/me"),
    ("get", "/api/v1/auth/mfa/status"),
    ("get", "/api/v1/openapi.json"),
}


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    name = ref.rsplit("/", 1)[-1]
    resolved: dict[str, Any] = document["components"]["schemas"][name]
    return resolved


async def test_openapi_document_is_valid_and_lists_every_route(client: Any, app: Any) -> None:
    response = await client.get("/api/v1/openapi.json")
    assert response.status == 200
    document = await response.json()
    assert document["openapi"].startswith("3.1.")
    OPENAPI_31_VALIDATOR.validate(document)
    # Every embedded schema is itself a valid JSON Schema 2020-12 document.
    for name, schema in document["components"]["schemas"].items():
        jsonschema_rs.meta.validate(schema)
        assert name

    listed = {(m, p) for p, item in document["paths"].items() for m in item}
    registered = {(spec.method.lower(), spec.path) for spec in api_routes(app[ROUTE_SPEC])}
    assert listed == registered
    assert listed >= AUTH_PATHS
    operation_ids = [
        op["operationId"] for item in document["paths"].values() for op in item.values()
    ]
    assert len(operation_ids) == len(set(operation_ids))

    for spec in api_routes(app[ROUTE_SPEC]):
        operation = document["paths"][spec.path][spec.method.lower()]
        assert operation["summary"], spec.name
        assert str(spec.status) in operation["responses"], spec.name
        if spec.access is Access.AUTH:
            assert operation["security"] == [{"cookieAuth": []}], spec.name
        elif spec.access is Access.TRY:
            assert operation["security"] == [{"cookieAuth": []}, {}], spec.name
        elif spec.access is Access.API_KEY:
            # Any one of several scopes: one requirement each (OpenAPI reads a list as "or").
            scopes = spec.scope if isinstance(spec.scope, tuple) else (spec.scope,)
            assert operation["security"] == [{"apiKeyAuth": [s]} for s in scopes], spec.name
        else:
            assert "security" not in operation, spec.name
        if spec.body is None:
            assert "requestBody" not in operation, spec.name
            continue
        content = operation["requestBody"]["content"][spec.content_type]
        schema = resolve(document, content["schema"])
        # Generated from the pydantic model, not written by hand.
        expected = spec.body.model_json_schema(by_alias=True)
        assert set(schema["properties"]) == set(expected["properties"]), spec.name
        assert set(schema.get("required", [])) == set(expected.get("required", [])), spec.name
        assert schema.get("additionalProperties") == expected.get("additionalProperties")


async def test_auth_request_bodies_are_described(client: Any) -> None:
    document = await (await client.get("/api/v1/openapi.json")).json()

    def body_schema(path: str) -> dict[str, Any]:
        operation = document["paths"][path]["post"]
        return resolve(document, operation["requestBody"]["content"]["application/json"]["schema"])

    register = body_schema("/auth/register")
    assert set(register["properties"]) == {
        "email",
        "password",
        "firstName",
        "lastName",
        "captchaToken",
    }
    assert set(register["required"]) == {"email", "password"}
    assert register["properties"]["email"]["format"] == "email"
    assert register["properties"]["password"]["minLength"] == 8
    assert register["properties"]["password"]["maxLength"] == 256
    assert register["additionalProperties"] is False
    assert body_schema("/auth/verify-email")["required"] == ["token"]
    assert set(body_schema("/api/v1/auth/login")["required"]) == {"email", "password"}
    assert set(body_schema("/api/v1/auth/password-reset/confirm")["required"]) == {
        "token",
        "password",
    }
    assert body_schema("/api/v1/auth/resend-verification")["required"] == ["email"]
    assert "409" in document["paths"]["/auth/verify-email"]["post"]["responses"]
    me = document["paths"]["/api/v1/users/me"]["get"]["responses"]["200"]["content"]
    me_schema = me["application/json"]["schema"]
    assert len(me_schema["anyOf"]) == 2  # signed in | anonymous, unwrapped


def response_validator(document: dict[str, Any], method: str, path: str) -> Any:
    """A validator for the documented 200 body of an operation, refs resolved in the document."""
    content = document["paths"][path][method]["responses"]["200"]["content"]
    schema = content["application/json"]["schema"]
    root = {"components": document["components"], **schema}
    return jsonschema_rs.Draft202012Validator(root)


async def test_real_answers_match_the_documented_schemas(
    client: Any, make_client: Any, factory: Any
) -> None:
    document = await (await client.get("/api/v1/openapi.json")).json()
    anonymous = await (await client.get("/api/v1/users/me")).json()
    me = response_validator(document, "get", "/api/v1/users/me")
    me.validate(anonymous)
    user = await factory.user()
    signed = await make_client(cookies=await factory.cookies(user))
    me.validate(await (await signed.get("/api/v1/users/me")).json())
    registered = await client.post(
        "/auth/register", json={"email": "doc@example.com", "password": "long enough pw"}
    )
    response_validator(document, "post", "/auth/register").validate(await registered.json())
    login = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    response_validator(document, "post", "/api/v1/auth/login").validate(await login.json())
    mfa = await client.get("/api/v1/auth/mfa/status")
    response_validator(document, "get", "/api/v1/auth/mfa/status").validate(await mfa.json())
    assert not me.is_valid({"user": None, "account": None})


# --- the published document agrees with the wire ------------------------------------------

# The OpenAPI 3.1 Schema Object dialect (spec.openapis.org/oas/3.1/dialect/base): JSON Schema
# 2020-12 plus the OAS base vocabulary, whose keywords are annotations.
OAS_DIALECT = "https://spec.openapis.org/oas/3.1/dialect/base"
OAS_META_BASE = "https://spec.openapis.org/oas/3.1/meta/base"
OAS_SCHEMAS: list[tuple[str, Any]] = [
    (
        OAS_DIALECT,
        {
            "$id": OAS_DIALECT,
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$vocabulary": {
                "https://json-schema.org/draft/2020-12/vocab/core": True,
                "https://json-schema.org/draft/2020-12/vocab/applicator": True,
                "https://json-schema.org/draft/2020-12/vocab/unevaluated": True,
                "https://json-schema.org/draft/2020-12/vocab/validation": True,
                "https://json-schema.org/draft/2020-12/vocab/meta-data": True,
                "https://json-schema.org/draft/2020-12/vocab/format-annotation": True,
                "https://json-schema.org/draft/2020-12/vocab/content": True,
                "https://spec.openapis.org/oas/3.1/vocab/base": False,
            },
            "$dynamicAnchor": "meta",
            "allOf": [
                {"$ref": "https://json-schema.org/draft/2020-12/schema"},
                {"$ref": OAS_META_BASE},
            ],
        },
    ),
    (
        OAS_META_BASE,
        {
            "$id": OAS_META_BASE,
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$vocabulary": {"https://spec.openapis.org/oas/3.1/vocab/base": True},
            "$dynamicAnchor": "meta",
            "type": ["object", "boolean"],
            "properties": {
                "example": True,
                "discriminator": {"type": "object"},
                "externalDocs": {"type": "object"},
                "xml": {"type": "object"},
            },
        },
    ),
]
DOCUMENT_URI = "urn:tenantd:openapi"


def pointer(*parts: str) -> str:
    """A URI fragment (RFC 6901 JSON pointer, percent-encoded) naming a place in the document."""
    escaped = "/".join(part.replace("~", "~0").replace("/", "~1") for part in ("", *parts))
    return quote(escaped, safe="/~")


def document_validator(document: dict[str, Any], *parts: str) -> Any:
    """A validator for the schema at `parts` inside the published document, in the OAS 3.1
    dialect, its $refs resolved against the document itself; formats are asserted."""
    registry = jsonschema_rs.Registry([*OAS_SCHEMAS, (DOCUMENT_URI, document)])
    schema = {"$schema": OAS_DIALECT, "$ref": f"{DOCUMENT_URI}#{pointer(*parts)}"}
    return jsonschema_rs.validator_for(schema, registry=registry, validate_formats=True)


def body_validator(document: dict[str, Any], method: str, path: str) -> Any:
    return document_validator(
        document, "paths", path, method, "requestBody", "content", "application/json", "schema"
    )


# RFC 8291's worked example keys: a real P-256 point and auth secret, as a browser encodes them.
P256DH = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
AUTH = "BTBZMqHH6r4Tts7J_aSIgg"
CHROME: dict[str, Any] = {
    "endpoint": "https://fcm.googleapis.com/fcm/send/eD1u0FTQ8dA:APA91bFxw9xK_y0iC-8sV1n2Q",
    "expirationTime": None,
    "keys": {"p256dh": P256DH, "auth": AUTH},
}
FIREFOX = {
    "endpoint": "https://updates.push.services.mozilla.com/wpush/v2/gAAAAABmZ0x7QW1fX2VuZHBvaW50",
    "keys": {"auth": AUTH, "p256dh": P256DH},
}
SUBSCRIBE = "/api/v1/notifications/push/subscribe"
OAUTH_PROVIDER = "fake"
OAUTH_CLIENT_ID = "tenantd-openapi-client"
OAUTH_CLIENT_SECRET = "openapi-client-secret-4d1e"


@pytest.fixture
async def idp(aiohttp_server: Any) -> FakeIdP:
    fake = FakeIdP(
        client_id=OAUTH_CLIENT_ID,
        client_secret=OAUTH_CLIENT_SECRET,
        redirect_uris={f"{ORIGIN}/api/v1/auth/oauth/{OAUTH_PROVIDER}/callback"},
    )
    server = await aiohttp_server(fake.app())
    fake.issuer = str(server.make_url("")).rstrip("/")
    return fake


@pytest.fixture
def env(env: dict[str, str], idp: FakeIdP) -> dict[str, str]:
    public, private = generate_keys()
    env.update(
        {
            "WEB_PUSH_VAPID_PUBLIC_KEY": public,
            "WEB_PUSH_VAPID_PRIVATE_KEY": private,
            "WEB_PUSH_VAPID_SUBJECT": "mailto:ops@example.com",
            "OAUTH_PROVIDERS": OAUTH_PROVIDER,
            "OAUTH_FAKE_ISSUER": idp.issuer,
            "OAUTH_FAKE_CLIENT_ID": OAUTH_CLIENT_ID,
            "OAUTH_FAKE_CLIENT_SECRET": OAUTH_CLIENT_SECRET,
        }
    )
    return env


def with_keys(**keys: Any) -> dict[str, Any]:
    return {**CHROME, "keys": {**CHROME["keys"], **keys}}


# (body, whether it is a valid subscription): the schema and the server must both say so.
SUBSCRIPTIONS = [
    (CHROME, True),
    (FIREFOX, True),
    ({**CHROME, "expirationTime": 1_767_225_600_000}, True),
    (with_keys(p256dh=P256DH + "="), True),  # padded base64url is still base64url
    ({**CHROME, "expirationTime": False}, False),
    ({**CHROME, "expirationTime": "1767225600000"}, False),
    ({**CHROME, "expirationTime": -1}, False),
    ({**CHROME, "keys": {"p256Dh": P256DH, "auth": AUTH}}, False),  # not the browser's name
    (with_keys(p256dh=P256DH[:-1]), False),
    (with_keys(p256dh="A" + P256DH[1:]), False),  # not an uncompressed point
    (with_keys(auth=AUTH + "AA"), False),
    (with_keys(auth="a+b/" * 5 + "ab"), False),  # base64, not base64url
    ({**CHROME, "endpoint": "ftp://fcm.googleapis.com/fcm/send/x"}, False),
    ({**CHROME, "endpoint": "https://fcm.googleapis.com/fcm/send/a b"}, False),
    ({**CHROME, "endpoint": "https://fcm.googleapis.com/fcm/send/a\x00b"}, False),
    ({**CHROME, "extra": 1}, False),
]


async def test_browser_subscriptions_pass_the_published_schema_and_the_server(
    client: Any, make_client: Any, factory: Any
) -> None:
    document = await (await client.get("/api/v1/openapi.json")).json()
    schema = body_validator(document, "post", SUBSCRIBE)
    signed = await make_client(cookies=await factory.cookies(await factory.user()))
    answered = response_validator(document, "post", SUBSCRIBE)
    for body, valid in SUBSCRIPTIONS:
        assert schema.is_valid(body) is valid, body
        response = await signed.post(SUBSCRIBE, json=body)
        payload = await response.json()
        assert response.status == (200 if valid else 422), (body, payload)
        if valid:
            answered.validate(payload)
        else:
            assert payload["error"]["code"] == "VALIDATION_ERROR"
            assert payload["error"]["details"]["fields"], payload
    # The browser's own body unsubscribes too.
    unsubscribe = body_validator(document, "delete", SUBSCRIBE)
    assert unsubscribe.is_valid(CHROME) and unsubscribe.is_valid({"endpoint": CHROME["endpoint"]})
    assert not unsubscribe.is_valid({**CHROME, "expirationTime": False})
    removed = await signed.delete(SUBSCRIBE, json=CHROME)
    assert (await removed.json())["data"] == {"removed": True}


def documented_examples(document: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        (name, example)
        for name, schema in document["components"]["schemas"].items()
        for example in schema.get("examples", [])
    ]


async def test_every_documented_example_passes_the_schema_and_the_server_model(
    client: Any, app: Any
) -> None:
    document = await (await client.get("/api/v1/openapi.json")).json()
    examples = documented_examples(document)
    names = {name for name, _ in examples}
    assert {"RegisterBody", "LoginBody", "PushSubscribeBody", "PreferenceBody"} <= names
    for name, example in examples:
        document_validator(document, "components", "schemas", name).validate(example)
    # The server's own models take them as they are.
    checked = 0
    for spec in app[ROUTE_SPEC]:
        if spec.body is None:
            continue
        operation = document["paths"][spec.path][spec.method.lower()]
        schema = operation["requestBody"]["content"][spec.content_type]["schema"]
        for example in resolve(document, schema).get("examples", []):
            spec.body.model_validate(example)
            checked += 1
    assert checked >= len(examples)


def string_schemas(document: dict[str, Any], schema: Any, seen: set[str]) -> Iterator[Any]:
    """Every string-typed schema reachable from `schema` (refs followed once)."""
    if not isinstance(schema, dict):
        return
    ref = schema.get("$ref")
    if ref is not None:
        if ref not in seen:
            seen.add(ref)
            yield from string_schemas(document, resolve(document, schema), seen)
        return
    if schema.get("type") == "string":
        yield schema
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(key, []):
            yield from string_schemas(document, branch, seen)
    for key in ("items", "additionalProperties"):
        yield from string_schemas(document, schema.get(key), seen)
    for prop in schema.get("properties", {}).values():
        yield from string_schemas(document, prop, seen)


async def test_every_request_string_documents_the_control_character_rule(client: Any) -> None:
    document = await (await client.get("/api/v1/openapi.json")).json()
    found = 0
    for item in document["paths"].values():
        for operation in item.values():
            inputs = [param["schema"] for param in operation.get("parameters", [])]
            for media in operation.get("requestBody", {}).get("content", {}).values():
                inputs.append(media["schema"])
            for schema in inputs:
                for string in string_schemas(document, schema, set()):
                    found += 1
                    if "enum" in string or string.get("format") == "uuid":
                        continue
                    # An email's format (RFC 5321) already has no room for control characters.
                    checker = jsonschema_rs.validator_for(string, validate_formats=True)
                    assert not checker.is_valid("a\x00b"), string
                    assert not checker.is_valid("a\x1bb"), string
    assert found > 20


async def test_oauth_redirects_are_documented_as_redirects(client: Any) -> None:
    document = await (await client.get("/api/v1/openapi.json")).json()
    for step in ("start", "callback"):
        path = f"/api/v1/auth/oauth/{{provider}}/{step}"
        answer = document["paths"][path]["get"]["responses"]["302"]
        assert "content" not in answer
        assert answer["headers"]["Location"]["required"] is True
        response = await client.get(path.format(provider=OAUTH_PROVIDER), allow_redirects=False)
        assert response.status == 302
        location = response.headers["Location"]
        document_validator(
            document, "paths", path, "get", "responses", "302", "headers", "Location", "schema"
        ).validate(location)
        assert await response.read() == b""
    # start sends the browser to the provider; the callback (no state cookie) back to /login.
    assert response.headers["Location"].startswith("/login?error=")
    # A header-splitting returnTo is refused outright: no redirect, no cookie.
    injected = await client.get(
        f"/api/v1/auth/oauth/{OAUTH_PROVIDER}/start",
        params={"returnTo": "/ok\r\nSet-Cookie: a=b"},
        allow_redirects=False,
    )
    assert injected.status == 422
    assert "returnTo" in (await injected.json())["error"]["details"]["fields"]
    assert "Location" not in injected.headers and "Set-Cookie" not in injected.headers


async def test_listing_with_a_cursor_matches_the_documented_shapes(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    signed = await make_client(cookies=await factory.cookies(user))
    document = await (await signed.get("/api/v1/openapi.json")).json()
    cursor = next(
        p
        for p in document["paths"]["/api/v1/notifications"]["get"]["parameters"]
        if p["name"] == "cursor"
    )
    cursor_schema = jsonschema_rs.validator_for(cursor["schema"])
    answered = response_validator(document, "get", "/api/v1/notifications")
    page = await (await signed.get("/api/v1/notifications", params={"limit": "1"})).json()
    answered.validate(page)
    # The published event-type pattern is the registry's own rule.
    assert registry._TYPE_PATTERN.pattern == EVENT_TYPE_PATTERN
    for bad in ("not a cursor", "abc=def", "é"):
        assert not cursor_schema.is_valid(bad)
        response = await signed.get("/api/v1/notifications", params={"cursor": bad})
        assert response.status == 422
        assert "cursor" in (await response.json())["error"]["details"]["fields"]
