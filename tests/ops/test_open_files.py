"""`tenantd serve` raises its soft open-files limit for the SSE stream cap (each stream is a
socket), up to the hard limit, and warns when even that is too low."""

from __future__ import annotations

import logging
import resource

import pytest

from tenantd.cli import serve


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, int]]:
    state = {"now": (1024, 4096)}
    monkeypatch.setattr(resource, "getrlimit", lambda _kind: state["now"])

    def setrlimit(_kind: int, value: tuple[int, int]) -> None:
        state["now"] = value

    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return state


def test_soft_limit_is_raised_to_what_the_streams_need(limits: dict[str, tuple[int, int]]) -> None:
    assert serve.raise_open_files_limit(3000) == 3000
    assert limits["now"] == (3000, 4096)


def test_never_above_the_hard_limit_and_a_warning_says_so(
    limits: dict[str, tuple[int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=serve.__name__):
        assert serve.raise_open_files_limit(11_024) == 4096
    assert limits["now"] == (4096, 4096)
    assert "LimitNOFILE" in caplog.text


def test_enough_already_calls_nothing(
    limits: dict[str, tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    limits["now"] = (65536, 65536)

    def refuse(_kind: int, _value: tuple[int, int]) -> None:
        raise AssertionError("setrlimit called (systemd's filter would kill the process)")

    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert serve.raise_open_files_limit(11_024) == 65536
