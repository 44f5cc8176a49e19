"""A cluster that loses nothing (issue 31, part 4): scripts/cluster's harness (bench/cluster.py)
at its small size. Three `tenantd serve` on a primary, a streaming replica and a private NATS;
under sign-ins, refreshes, sends and SSE readers one instance is killed with SIGKILL, NATS is
restarted and the replica's replay paused. Every check of the harness must hold. The checks
themselves are shown to fail on what they guard against (a lost send, a missed notification,
a refused session, a seat race that took more than the free seats), without a cluster."""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
from pathlib import Path

import pytest

from bench.cluster import (
    SIZES,
    Attempt,
    Check,
    Failure,
    Reader,
    Result,
    Round,
    User,
    World,
    check_sessions,
    contest_checks,
    delivery_checks,
    print_result,
    run,
    stream_checks,
)

pytestmark = pytest.mark.slow


def table(result: Result) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_result(result)
    return out.getvalue()


def test_a_cluster_under_faults_loses_nothing() -> None:
    # Not tmp_path: pytest removes the basetemp directories of older runs, and other pytest
    # runs on the machine would take the clusters' data away while they run.
    root = Path(tempfile.mkdtemp(prefix="tenantd-cluster-"))
    size = SIZES["test"]
    try:
        result = run(size, root / "cluster")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    shown = table(result)
    print(shown)  # shown with -s or -rP: the figures of a passing run too
    failed = [check.name for check in result.checks if not check.ok]
    assert not failed, shown
    # The faults happened, under load.
    assert len(result.faults) == 3, shown
    assert int(result.check("sends accepted").value) >= size.sends, shown
    # The killed instance had readers: they reconnected with Last-Event-ID and lost nothing.
    assert int(result.check("sse reconnections (Last-Event-ID)").value) >= 1, shown
    assert result.check("sse notifications missed").value == "0", shown
    assert result.check("sends without their rows (lost)").value == "0", shown
    # The last seats were raced for through the faults: some accepts won, some were refused.
    races = result.check("seat races (rounds, of them during the faults)").value
    assert int(races.split()[0]) >= 4 * size.contests and int(races.split()[-1]) >= 1, shown


def by_name(checks: list[Check]) -> dict[str, bool]:
    return {check.name: check.ok for check in checks}


def test_the_delivery_check_fails_on_a_lost_or_doubled_send() -> None:
    ids = ["a", "b", "c"]
    rows = [
        {"id": "a", "channel": "in_app", "status": "sent"},
        {"id": "a", "channel": "sse", "status": "sent"},
        {"id": "b", "channel": "in_app", "status": "sent"},  # its SSE row is missing
    ]  # and c has no rows at all
    checks = by_name(delivery_checks(3, ids, rows, total=4))
    assert not checks["sends without their rows (lost)"]
    assert not checks["sends with other than one row per channel"]
    assert not checks["notifications beyond the accepted (doubled)"]
    whole = [{"id": i, "channel": c, "status": "sent"} for i in ids for c in ("in_app", "sse")]
    assert all(by_name(delivery_checks(3, ids, whole, total=3)).values())


def test_the_stream_check_fails_on_a_missed_notification_not_on_a_repeat() -> None:
    reader = Reader(User("u1", "u1@example.com"), slot=0, ids=["n1", "n2", "n2"], connects=2)
    checks = by_name(stream_checks({"u1": {"n1", "n2", "n3"}}, [reader]))
    assert not checks["sse notifications missed"]
    checks = by_name(stream_checks({"u1": {"n1", "n2"}}, [reader]))
    assert checks["sse notifications missed"] and checks["sse ids received twice (not a failure)"]


def test_the_session_check_allows_only_retried_failures_on_the_killed_instance(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, {}, http=None)  # type: ignore[arg-type]
    world.counts.update(signin=1, refresh=1)
    world.failures = [Failure("refresh", "killed", "ServerDisconnectedError", True, True)]
    assert all(by_name(check_sessions(world)).values())
    for failure in (
        Failure("refresh", "killed", "ServerDisconnectedError", True, recovered=False),
        Failure("refresh", "live", "refused 401", False, recovered=False),
        Failure("signin", "live", "HTTP 503", False, recovered=True),
    ):
        world.failures = [failure]
        assert not by_name(check_sessions(world))["refused or failed otherwise"], failure


def race(attempts: list[Attempt], accepted: set[str], **fields: int) -> Round:
    values = {"cap": 5, "free": 1, "active": 4, "owners": 1, "transfers": 1} | fields
    return Round("acc", attempts=attempts, accepted=accepted, during=True, **values)


def test_the_contest_check_fails_on_a_seat_taken_beyond_the_cap_not_on_a_retried_accept(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, {}, http=None)  # type: ignore[arg-type]
    world.answers.update({"remove 200": 1})
    won, full = Attempt("u1", 200, "", False), Attempt("u2", 409, "SEAT_LIMIT_REACHED", False)
    # u1 won the seat; u3's accept committed but its instance died, the retry answered 410.
    lost = Attempt("u3", 410, "INVITATION_ALREADY_USED", retried=True)
    world.rounds = [race([won, full], {"u1"}), race([lost, full], {"u3"})]
    assert all(by_name(contest_checks(world)).values())
    for bad, check in (
        (race([won, Attempt("u2", 200, "", False)], {"u1", "u2"}), "races that took more"),
        (race([won, full], set()), "accepts answered 200 without their membership"),
        (race([won, won], {"u1"}), "users answered 200 twice in one race"),
        (race([full], {"u2"}), "accepts committed, answered otherwise unexplained"),
        (race([won, full], {"u1"}, active=6), "races ending over the seat cap (SQL)"),
        (race([won, full], {"u1"}, owners=2), "races ending without exactly one owner (SQL)"),
    ):
        world.rounds = [bad]
        names = {c.name: c.ok for c in contest_checks(world)}
        assert [n for n, ok in names.items() if not ok and n.startswith(check)], bad
