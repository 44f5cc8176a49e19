"""Fixtures of the composition-root tests: Domains opened without an app, as the ops
tests open them."""

from __future__ import annotations

from tests.ops.conftest import standalone_services

__all__ = ["standalone_services"]
