"""Base pydantic models: camelCase JSON, strict request bodies, shared envelopes.

Request text never carries C0 control characters (NUL above all: PostgreSQL refuses it in
text, and the others forge log lines and mail headers). `RequestBody` refuses them in every
string field and publishes the rule as each string's JSON Schema `pattern`; a field typed
`MultilineText` keeps tab, LF and CR. Query and path parameters are checked by the routing
layer with `control_character_fields`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationInfo,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from tenantd.addresses import MAX_EMAIL_LENGTH, InvalidEmail, canonical_email

# Published patterns (ECMA-262, as JSON Schema reads them) and the server's checks agree.
# A single-line field also refuses DEL, the C1 controls (U+0085 NEXT LINE among them) and the
# line and paragraph separators U+2028, U+2029: each breaks a line somewhere (mail headers,
# JavaScript before ES2019, log viewers) and such a name would break every mail carrying it.
SINGLE_LINE_PATTERN = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$"
MULTILINE_PATTERN = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f]*$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
CONTROL_MESSAGE = "must not contain control characters"


class Multiline:
    """Field marker: this text may span lines (tab, LF and CR allowed)."""


MultilineText = Annotated[str, Multiline()]


def holds_control_characters(value: Any, *, multiline: bool = False) -> bool:
    """Whether a string (or a list or mapping of them) holds a refused control character."""
    if isinstance(value, str):
        return (_CONTROL_BUT_LINES if multiline else _CONTROL).search(value) is not None
    if isinstance(value, Mapping):
        return _any_control(value.keys(), multiline) or _any_control(value.values(), multiline)
    if isinstance(value, list | tuple | set | frozenset):
        return _any_control(value, multiline)
    return False


def _any_control(values: Iterable[Any], multiline: bool) -> bool:
    return any(holds_control_characters(item, multiline=multiline) for item in values)


def control_character_fields(values: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The single-line parameters (query or path: name, value pairs) holding a control character."""
    return {
        name: CONTROL_MESSAGE
        for name, value in values
        if holds_control_characters(name) or holds_control_characters(value)
    }


def forbid_control_characters(schema: dict[str, Any], *, multiline: bool = False) -> None:
    """Give every plain string of a JSON Schema the no-control-character pattern (in place).

    Strings that already carry a pattern, an enum, a const or a format whose grammar has no
    control character (email, uuid, date-time) keep them: those are narrower (and a second
    constraint on an email makes schema-driven generators search for minutes). Referenced
    schemas are models that publish their own rule.
    """
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(key, []):
            forbid_control_characters(branch, multiline=multiline)
    items = schema.get("items")
    if isinstance(items, dict):
        forbid_control_characters(items, multiline=multiline)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        forbid_control_characters(extra, multiline=multiline)
    if schema.get("type") != "string" or schema.keys() & {"pattern", "enum", "const"}:
        return
    if schema.get("format") in {"email", "uuid", "date-time"}:
        return
    schema["pattern"] = MULTILINE_PATTERN if multiline else SINGLE_LINE_PATTERN


def _one_mailbox(value: str) -> str:
    try:
        return canonical_email(value)
    except InvalidEmail as error:
        raise PydanticCustomError("email", error.reason) from None


# Every body field that becomes an address: one mailbox, in the normal form (addresses.py).
Mailbox = Annotated[
    str,
    Field(max_length=MAX_EMAIL_LENGTH, json_schema_extra={"format": "email"}),
    AfterValidator(_one_mailbox),
]


@dataclass(frozen=True)
class Matches:
    """Annotation: the string must match `pattern` (published as the JSON Schema `pattern`,
    refused with `message`, so the document and the server hold one rule)."""

    pattern: str
    message: str

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        # Python's `$` also matches before a final newline; ECMA-262's does not.
        compiled = re.compile(
            self.pattern[:-1] + r"\Z" if self.pattern.endswith("$") else self.pattern
        )
        message = self.message

        def check(value: str) -> str:
            if compiled.search(value) is None:
                raise PydanticCustomError("string_pattern_mismatch", message)
            return value

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = self.pattern
        return json_schema


class ApiModel(BaseModel):
    """Response models: snake_case in Python, camelCase in JSON."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


RowOf = TypeVar("RowOf", bound=ApiModel)


def from_row(model: type[RowOf], row: Mapping[str, Any], **computed: Any) -> RowOf:
    """`model` of a database row: each field the column of its name, but the `computed` ones."""
    return model.model_validate(
        {name: computed[name] if name in computed else row[name] for name in model.model_fields}
    )


class RowModel(ApiModel):
    """A response model that is a database row: each field the column of its name."""

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Self:
        return from_row(cls, row)


class RequestBody(ApiModel):
    """Request bodies refuse unknown fields so typos fail loudly, and control characters."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", str_max_length=10_000
    )

    @field_validator("*")
    @classmethod
    def _refuse_control_characters(cls, value: Any, info: ValidationInfo) -> Any:
        # Nested bodies are RequestBody models too: they check their own fields.
        if holds_control_characters(value, multiline=cls._multiline(info.field_name)):
            raise PydanticCustomError("control_character", CONTROL_MESSAGE)
        return value

    @classmethod
    def _multiline(cls, name: str | None) -> bool:
        field = cls.model_fields.get(name) if name else None
        return field is not None and any(isinstance(m, Multiline) for m in field.metadata)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        properties = handler.resolve_ref_schema(json_schema).get("properties", {})
        for name, field in cls.model_fields.items():
            prop = properties.get(field.alias or name, properties.get(name))
            if prop is not None:
                forbid_control_characters(prop, multiline=cls._multiline(name))
        return json_schema


class Message(ApiModel):
    message: str


class Empty(ApiModel):
    pass


class ErrorDetail(ApiModel):
    code: str
    message: str
    details: dict[str, Any] | None = None


class ErrorEnvelope(ApiModel):
    success: bool = False
    error: ErrorDetail
