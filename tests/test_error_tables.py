"""Domain errors declared from a table (`tenantd.errors.declare`) are bound to the name their
code gives them, keep their kind and status, and pickle like any class."""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import pytest

from tenantd.errors import AppError, Conflict, Forbidden

ROOT = Path(__file__).resolve().parent.parent / "tenantd"
MODULES = sorted(
    "tenantd." + ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in ROOT.glob("*/errors.py")
)


@pytest.mark.parametrize("module_name", MODULES)
def test_every_error_is_bound_to_its_own_name(module_name: str) -> None:
    module = importlib.import_module(module_name)
    own = {
        name: obj
        for name, obj in vars(module).items()
        if isinstance(obj, type) and issubclass(obj, AppError) and obj.__module__ == module_name
    }
    assert own, module_name
    for name, cls in own.items():
        assert cls.__name__ == name == cls.__qualname__
        if "__init__" in vars(cls):
            continue  # a hand-written class with its own arguments
        revived = pickle.loads(pickle.dumps(cls("why")))
        assert type(revived) is cls and revived.message == "why"


def test_declared_rows_keep_kind_status_code_and_message() -> None:
    from tenantd.accounts.errors import InvitationExpired, SeatLimitReached
    from tenantd.auth.errors import CaptchaFailed
    from tenantd.identity.errors import UserDisabled

    assert issubclass(SeatLimitReached, Conflict) and SeatLimitReached.status == 409
    assert SeatLimitReached.code == "SEAT_LIMIT_REACHED"
    assert SeatLimitReached().message == "The account has no free seat"
    assert InvitationExpired.status == 410 and InvitationExpired.__bases__ == (AppError,)
    assert CaptchaFailed.status == 422 and CaptchaFailed.__bases__ == (AppError,)
    assert UserDisabled.status == 403 and not issubclass(UserDisabled, Forbidden)


def test_the_kernel_keeps_only_the_generic_kinds() -> None:
    """Issue 27's bar: the kernel's errors.py holds at most ten classes; a domain's errors
    live in its own errors.py."""
    import tenantd.errors as kernel

    classes = [
        obj
        for obj in vars(kernel).values()
        if isinstance(obj, type) and obj.__module__ == kernel.__name__
    ]
    assert len(classes) <= 10, sorted(c.__name__ for c in classes)
