"""/api/v1/openapi.json, generated from the route table and its pydantic models."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, TypeAdapter

from tenantd import __version__
from tenantd.web.routing import ROUTE_SPEC, Access, Routes, RouteSpec, path_params
from tenantd.web.schemas import ErrorEnvelope

routes = Routes("meta")

REF = "#/components/schemas/{model}"

ERROR_STATUSES = {
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


def _schema(annotation: Any, components: dict[str, Any]) -> dict[str, Any]:
    schema = TypeAdapter(annotation).json_schema(by_alias=True, ref_template=REF)
    for name, definition in schema.pop("$defs", {}).items():
        components[name] = definition
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        components[annotation.__name__] = schema
        return {"$ref": REF.format(model=annotation.__name__)}
    return schema


def _operation(spec: RouteSpec, components: dict[str, Any]) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": spec.summary,
        "operationId": f"{spec.method.lower()}_{spec.view.__name__}",
        "tags": [spec.tag],
    }
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in path_params(spec.path)
    ]
    if spec.query is not None:
        query_schema = spec.query.model_json_schema(by_alias=True)
        required = set(query_schema.get("required", []))
        for name, prop in query_schema.get("properties", {}).items():
            params.append(
                {"name": name, "in": "query", "required": name in required, "schema": prop}
            )
    if params:
        operation["parameters"] = params
    if spec.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {spec.content_type: {"schema": _schema(spec.body, components)}},
        }
    if spec.access in (Access.AUTH, Access.TRY):
        operation["security"] = [{"cookieAuth": []}]
    data_schema: dict[str, Any] = (
        _schema(spec.response, components) if spec.response is not None else {}
    )
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
    if spec.produces != "application/json":
        data_schema = {"type": "string"}
    responses: dict[str, Any] = {
        str(spec.status): {
            "description": "Success",
            "content": {spec.produces: {"schema": data_schema}},
        }
    }
    error_ref = {"$ref": REF.format(model="ErrorEnvelope")}
    for status, description in {**ERROR_STATUSES, **spec.responses}.items():
        if status == spec.status:
            continue
        responses[str(status)] = {
            "description": description,
            "content": {"application/json": {"schema": error_ref}},
        }
    operation["responses"] = responses
    return operation


def build_openapi(specs: list[RouteSpec]) -> dict[str, Any]:
    components: dict[str, Any] = {}
    _schema(ErrorEnvelope, components)
    paths: dict[str, dict[str, Any]] = {}
    for spec in specs:
        paths.setdefault(spec.path, {})[spec.method.lower()] = _operation(spec, components)
    return {
        "openapi": "3.1.0",
        "info": {"title": "tenantd", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "cookieAuth": {"type": "apiKey", "in": "cookie", "name": "auth_token"}
            },
        },
    }


@routes.get("/api/v1/openapi.json", access=Access.PUBLIC, wrapped=False, summary="OpenAPI document")
async def openapi(request: web.Request) -> dict[str, Any]:
    cached: dict[str, Any] | None = request.app.get(OPENAPI_CACHE)
    if cached is None:
        cached = build_openapi(request.app[ROUTE_SPEC])
        request.app[OPENAPI_CACHE] = cached
    return cached


OPENAPI_CACHE: web.AppKey[dict[str, Any]] = web.AppKey("openapi_cache")
