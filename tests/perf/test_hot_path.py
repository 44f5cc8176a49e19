"""The shortcuts of the cached `/me` and of a cold token (issue 19) read what the slow paths
read: the session cookie straight from the header, the JWT header parse kept per segment."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid

import jwt
import pytest
from aiohttp.test_utils import make_mocked_request

from tenantd.errors import ValidationFailed
from tenantd.identity.keys.keyring import MAX_HEADERS, Keyring, UntrustedToken
from tenantd.identity.tokens import ISSUER, REQUIRED_CLAIMS, token_hash
from tenantd.notifications.schemas import ListQuery
from tenantd.web import body
from tenantd.web.body import QUERY_MEMO_SIZE, parse_query
from tenantd.web.cookie_header import token_cookie
from tenantd.web.schemas import ApiModel

JWT = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"

HEADERS = [
    None,
    "",
    f"auth_token={JWT}",
    f"theme=dark; auth_token={JWT}; lang=en",
    f"auth_token=old.token.value; auth_token={JWT}",  # repeated: the last one, as aiohttp
    "auth_token=",
    "auth_token",
    "  auth_token  =  spaced.value  ",
    'auth_token="quoted.value"',
    'theme="a;b"; auth_token=after.quoted',
    "auth_token=has space",
    "auth_token=semi%3Bcolon",
    "auth_token=a=b=c",
    "other_auth_token=x; auth_token_x=y",
    "auth_token=\u00e9t\u00e9",
    "no_equals_here; auth_token=tail.value",
    "auth_token=a\\b",
    "auth_token=plus+slash/==",
    "auth_token=tab\tinside",
    "auth_token=\u0661\u0662",  # non-ASCII digits: not the token alphabet
]


@pytest.mark.parametrize("header", HEADERS)
def test_token_cookie_reads_what_request_cookies_reads(header: str | None) -> None:
    headers = {} if header is None else {"Cookie": header}
    request = make_mocked_request("GET", "/api/v1/users/me", headers=headers)
    assert token_cookie(request, "auth_token") == request.cookies.get("auth_token")


def hs256_keyring() -> Keyring:
    return Keyring(algorithm="HS256", secret_key="k" * 32)


def claims() -> dict[str, object]:
    now = time.time()
    return {"sub": str(uuid.uuid4()), "jti": str(uuid.uuid4()), "iat": now, "exp": now + 60}


def test_a_kept_header_never_stands_for_a_signature() -> None:
    keyring = hs256_keyring()
    good = keyring.sign({**claims(), "iss": ISSUER})
    keyring.decode(good, issuer=ISSUER, require=REQUIRED_CLAIMS)  # header now kept
    forged = jwt.encode({**claims(), "iss": ISSUER}, "another secret" * 4, algorithm="HS256")
    assert forged.partition(".")[0] == good.partition(".")[0]  # the same header segment
    with pytest.raises(UntrustedToken):
        keyring.decode(forged, issuer=ISSUER, require=REQUIRED_CLAIMS)
    header, _, rest = good.partition(".")
    with pytest.raises(UntrustedToken):
        keyring.decode(f"{header}.not-base64!.{rest}", issuer=ISSUER, require=REQUIRED_CLAIMS)


def test_malformed_headers_are_refused_and_not_kept() -> None:
    keyring = hs256_keyring()
    for token in ("not a jwt", "e30.e30", "!!!.e30.sig"):
        with pytest.raises(UntrustedToken):
            keyring.decode(token, issuer=ISSUER, require=REQUIRED_CLAIMS)
    assert keyring._headers == {}


def test_kept_headers_are_bounded() -> None:
    keyring = hs256_keyring()
    for index in range(MAX_HEADERS * 3):
        token = jwt.encode({**claims(), "iss": ISSUER}, keyring.secret_key, headers={"x": index})
        keyring.decode(token, issuer=ISSUER, require=REQUIRED_CLAIMS)
        assert len(keyring._headers) <= MAX_HEADERS


def test_token_hash_is_hmac_sha256_of_the_token() -> None:
    # Stored hashes (API keys, refresh and link tokens) must keep matching.
    expected = hmac.new(b"s" * 40, b"tdk_abc_def", hashlib.sha256).digest()
    assert token_hash("s" * 40, "tdk_abc_def") == expected


def test_a_frozen_query_model_is_parsed_once_per_query_string() -> None:
    def parse(path: str) -> ListQuery:
        return parse_query(make_mocked_request("GET", path), ListQuery)

    first = parse("/api/v1/notifications?limit=20")
    assert first == ListQuery(limit=20)
    assert parse("/api/v1/notifications?limit=20") is first
    assert parse("/api/v1/notifications?limit=21").limit == 21
    assert parse("/api/v1/notifications?limit=20&status=unread").status == "unread"
    for _ in range(2):  # refusals are never kept
        with pytest.raises(ValidationFailed):
            parse("/api/v1/notifications?limit=500")
        with pytest.raises(ValidationFailed):
            parse("/api/v1/notifications?cursor=a%0Ab")
    for index in range(QUERY_MEMO_SIZE * 2):
        assert parse(f"/api/v1/notifications?limit={index % 100 + 1}&x={index}").limit == (
            index % 100 + 1
        )
    assert len(body._QUERY_MEMO) <= QUERY_MEMO_SIZE


class Mutable(ApiModel):
    limit: int = 1


def test_a_mutable_query_model_is_parsed_every_time() -> None:
    def parse() -> Mutable:
        return parse_query(make_mocked_request("GET", "/x?limit=3"), Mutable)

    assert parse() is not parse()
