"""Turn DATABASE_URL (or the embedded cluster) into a libpq DSN."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit


def url_to_dsn(url: str) -> str:
    """postgresql://user:pw@host:port/db?host=/sock -> libpq key=value string."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ValueError("DATABASE_URL must start with postgresql://")
    fields: dict[str, str] = {}
    if parts.hostname:
        fields["host"] = unquote(parts.hostname)
    if parts.port:
        fields["port"] = str(parts.port)
    if parts.username:
        fields["user"] = unquote(parts.username)
    if parts.password:
        fields["password"] = unquote(parts.password)
    database = unquote(parts.path.lstrip("/"))
    if database:
        fields["dbname"] = database
    for key, value in parse_qsl(parts.query):
        fields[key] = value
    return " ".join(f"{key}={_quote(value)}" for key, value in fields.items())


def _quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"
