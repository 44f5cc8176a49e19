"""Fixtures of the suppression tests: the app started from env, as the email tests start it."""

from __future__ import annotations

from tests.email.conftest import http, start

__all__ = ["http", "start"]
