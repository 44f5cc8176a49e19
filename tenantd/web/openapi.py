"""/api/v1/openapi.json, generated from the route table and its pydantic models."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import TypeAdapter
from pydantic.json_schema import JsonSchemaMode

from tenantd import __version__
from tenantd.web.routing import ROUTE_SPEC, api_routes, path_params
from tenantd.web.schemas import SINGLE_LINE_PATTERN, ErrorEnvelope, forbid_control_characters
from tenantd.web.spec import OPEN_AS_IS, Access, Routes, RouteSpec


class OpenApiDocument:
    """An application's document, built from its route table (`specs`, which registration
    fills) on the first request that asks, then kept."""

    def __init__(self, specs: list[RouteSpec]):
        self._specs = specs
        self._document: dict[str, Any] | None = None

    def get(self) -> dict[str, Any]:
        if self._document is None:
            self._document = build_openapi(self._specs)
        return self._document


OPENAPI = web.AppKey("openapi_document", OpenApiDocument)


def _state(app: web.Application) -> None:
    app[OPENAPI] = OpenApiDocument(app[ROUTE_SPEC])


ROUTES = Routes("meta", state=_state)

REF = "#/components/schemas/{model}"

ERROR_STATUSES = {
    400: "Malformed HTTP request (refused before routing, e.g. a request line over 8 KiB)",
    401: "Missing or invalid session",
    403: "Forbidden",
    404: "Not found",
    409: "Conflict",
    410: "Gone",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Validation error",
    429: "Rate limited",
}


class Schemas:
    """Every model of the route table, generated in ONE pydantic pass.

    One pass matters: two domains may each have a model called `MembershipOut`; pydantic then
    gives them distinct component names instead of one silently overwriting the other.
    """

    def __init__(self, specs: list[RouteSpec]):
        inputs: list[tuple[Any, JsonSchemaMode, TypeAdapter[Any]]] = [
            ("error", "serialization", TypeAdapter(ErrorEnvelope))
        ]
        for index, spec in enumerate(specs):
            if spec.body is not None:
                inputs.append(((index, "body"), "validation", TypeAdapter(spec.body)))
            if spec.response is not None:
                inputs.append(((index, "response"), "serialization", TypeAdapter(spec.response)))
        mapping, definitions = TypeAdapter.json_schemas(inputs, by_alias=True, ref_template=REF)
        self.by_key = {key: schema for (key, _mode), schema in mapping.items()}
        self.components: dict[str, Any] = dict(definitions.get("$defs", {}))
        self.error = self.by_key["error"]

    def body(self, index: int) -> dict[str, Any]:
        return dict(self.by_key[(index, "body")])

    def response(self, index: int) -> dict[str, Any]:
        return dict(self.by_key.get((index, "response"), {}))


def _operation(spec: RouteSpec, index: int, schemas: Schemas) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": spec.summary,
        "operationId": f"{spec.method.lower()}_{spec.view.__name__}",
        "tags": [spec.tag],
    }
    # Parameters are single-line text: the routing layer refuses control characters (422).
    params = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": SINGLE_LINE_PATTERN},
        }
        for name in path_params(spec.path)
    ]
    if spec.query is not None:
        query_schema = spec.query.model_json_schema(by_alias=True)
        required = set(query_schema.get("required", []))
        for name, prop in query_schema.get("properties", {}).items():
            forbid_control_characters(prop)
            params.append(
                {"name": name, "in": "query", "required": name in required, "schema": prop}
            )
    if params:
        operation["parameters"] = params
    if spec.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {spec.content_type: {"schema": schemas.body(index)}},
        }
    if spec.access in (Access.AUTH, Access.TRY):
        # tryAuth also answers anonymous callers: the empty requirement says so.
        operation["security"] = (
            [{"cookieAuth": []}] if spec.access is Access.AUTH else [{"cookieAuth": []}, {}]
        )
    if spec.access is Access.API_KEY:
        # Server routes: a `tdk_` key holding the route's scope (issue 15).
        scopes = (spec.scope,) if isinstance(spec.scope, str) else spec.scope or ()
        operation["security"] = [{"apiKeyAuth": [scope]} for scope in scopes]
    data_schema = schemas.response(index)
    if spec.wrapped:
        data_schema = {
            "type": "object",
            "required": ["success", "data", "timestamp"],
            "properties": {
                "success": {"const": True},
                "data": data_schema,
                "timestamp": {"type": "string", "format": "date-time"},
            },
        }
    if spec.produces != "application/json" and not spec.produces.endswith("+json"):
        data_schema = {"type": "string"}
    success: dict[str, Any] = {
        "description": "Success",
        "content": {spec.produces: {"schema": data_schema}},
    }
    if spec.status == 204:
        success = {"description": "No content"}
    if 300 <= spec.status < 400:
        # A browser navigation (OAuth): the answer is where to go next, with no body.
        success = {
            "description": "Redirect",
            "headers": {
                "Location": {
                    "description": "Where the browser goes next",
                    "required": True,
                    "schema": {"type": "string", "format": "uri-reference"},
                }
            },
        }
    responses: dict[str, Any] = {str(spec.status): success}
    error_ref = schemas.error
    for status, description in {**ERROR_STATUSES, **spec.responses}.items():
        if status == spec.status:
            continue
        content: dict[str, Any] = {"application/json": {"schema": error_ref}}
        if spec.errors_as != "application/json":
            # The route's own protocol answers its errors; the router's refusals before it
            # runs (a control character in a path parameter) keep the envelope.
            content[spec.errors_as] = {"schema": {"type": "object"}}
        if status == 400:
            # aiohttp's HTTP parser answers these itself, in plain text, before any middleware.
            content["text/plain"] = {"schema": {"type": "string"}}
        responses[str(status)] = {"description": description, "content": content}
    operation["responses"] = responses
    return operation


def build_openapi(table: list[RouteSpec]) -> dict[str, Any]:
    """The document of the table's API routes (pages are not listed)."""
    specs = api_routes(table)
    schemas = Schemas(specs)
    paths: dict[str, dict[str, Any]] = {}
    for index, spec in enumerate(specs):
        paths.setdefault(spec.path, {})[spec.method.lower()] = _operation(spec, index, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "tenantd", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas.components,
            "securitySchemes": {
                "cookieAuth": {"type": "apiKey", "in": "cookie", "name": "auth_token"},
                "apiKeyAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "tdk_<id>_<secret>",
                },
            },
        },
    }


@ROUTES.get("/api/v1/openapi.json", **OPEN_AS_IS, summary="OpenAPI document")
async def openapi(request: web.Request) -> dict[str, Any]:
    return request.app[OPENAPI].get()
