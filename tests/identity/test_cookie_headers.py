"""The Set-Cookie headers tenantd writes itself are the ones aiohttp's Morsels would write,
and the last word on a cookie within one response still wins."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from aiohttp import hdrs, web

from tenantd.auth.schemas import SignedInUser, UserOut
from tenantd.identity.cookies import clear_cookie, set_cookie
from tenantd.settings import Settings
from tenantd.web.json import dumps

JWT = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLV8"
REFRESH = "AAAAAAAAQACgAAAAAAAAAQ.q83vEjRWeJCrze8SNFZ4kA.c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"


def morsel_headers(response: web.StreamResponse) -> list[str]:
    """What aiohttp writes for the response's Morsels when it sends the headers."""
    return [morsel.output(header="")[1:] for morsel in response.cookies.values()]


def written(response: web.StreamResponse) -> list[str]:
    return list(response.headers.getall(hdrs.SET_COOKIE, [])) + morsel_headers(response)


@pytest.mark.parametrize("secure", [True, False])
@pytest.mark.parametrize("value", [JWT, REFRESH, "plain", "a!#$%&'*+-.^_`|~:z"])
def test_a_plain_value_is_written_as_aiohttps_morsel_would_write_it(
    settings: Settings, secure: bool, value: str
) -> None:
    policy = settings.replaced(settings.web.model_copy(update={"cookie_secure": secure}))
    ours = web.Response()
    set_cookie(ours, policy, "auth_token", value, max_age=899)
    theirs = web.Response()
    theirs.set_cookie(
        "auth_token", value, max_age=899, path="/", httponly=True, samesite="Lax", secure=secure
    )
    assert list(ours.headers.getall(hdrs.SET_COOKIE)) == morsel_headers(theirs)
    assert not ours.cookies  # no Morsel left to write a second header


@pytest.mark.parametrize("value", ['needs "quotes"', "semi;colon", "sp ace", "é"])
def test_any_other_value_or_path_goes_through_aiohttp(settings: Settings, value: str) -> None:
    ours = web.Response()
    set_cookie(ours, settings, "next", value, max_age=60)
    assert hdrs.SET_COOKIE not in ours.headers
    assert ours.cookies["next"].value == value
    elsewhere = web.Response()
    set_cookie(elsewhere, settings, "state", "plain", max_age=60, path="/oauth/callback")
    assert written(elsewhere) == morsel_headers(elsewhere)
    assert "Path=/oauth/callback" in written(elsewhere)[0]


def test_the_last_word_on_a_cookie_wins(settings: Settings) -> None:
    response = web.Response()
    set_cookie(response, settings, "auth_token", "first", max_age=60)
    set_cookie(response, settings, "refresh_token", "kept", max_age=60)
    clear_cookie(response, settings, "auth_token")
    assert [h.split(";")[0] for h in written(response)] == ["refresh_token=kept", 'auth_token=""']
    set_cookie(response, settings, "auth_token", "again", max_age=60)
    assert [h.split(";")[0] for h in written(response)] == [
        "refresh_token=kept",
        "auth_token=again",
    ]
    set_cookie(response, settings, "auth_token", 'not "plain"', max_age=60)
    set_cookie(response, settings, "auth_token", "last", max_age=60)
    assert [h.split(";")[0] for h in written(response)] == [
        "refresh_token=kept",
        "auth_token=last",
    ]


@pytest.mark.parametrize(
    "verified_at",
    [
        None,
        dt.datetime(2026, 11, 24, 6, 6, 32, 532788, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 24, 6, 6, 32, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 24, 7, 6, 32, 5, tzinfo=dt.timezone(dt.timedelta(hours=1))),
    ],
)
def test_the_signed_in_answer_without_models_is_the_same_json(
    verified_at: dt.datetime | None,
) -> None:
    row = {
        "id": uuid.uuid4(),
        "email": "ada+ünïcode@example.com",
        "first_name": 'Ada "the first"',
        "last_name": "Lovelace\u2028",
        "email_verified_at": verified_at,
        "account_id": uuid.uuid4(),  # other columns of the row are not part of the answer
        "amr": ["pwd"],
    }
    model = SignedInUser(user=UserOut.of(row))
    assert dumps({"data": {"user": UserOut.json_of(row)}}) == dumps({"data": model})
