"""/api/v1/openapi.json: a valid OpenAPI 3.1 document generated from the route table."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from tenantd.web.routing import ROUTE_SPEC
from tenantd.web.spec import Access

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
    registered = {(spec.method.lower(), spec.path) for spec in app[ROUTE_SPEC]}
    assert listed == registered
    assert listed >= AUTH_PATHS
    operation_ids = [
        op["operationId"] for item in document["paths"].values() for op in item.values()
    ]
    assert len(operation_ids) == len(set(operation_ids))

    for spec in app[ROUTE_SPEC]:
        operation = document["paths"][spec.path][spec.method.lower()]
        assert operation["summary"], spec.name
        assert str(spec.status) in operation["responses"], spec.name
        if spec.access is Access.AUTH:
            assert operation["security"] == [{"cookieAuth": []}], spec.name
        elif spec.access is Access.TRY:
            assert operation["security"] == [{"cookieAuth": []}, {}], spec.name
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
    assert set(register["properties"]) == {"email", "password", "firstName", "lastName"}
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
