"""pytest-timeout for an asyncio suite under pytest-xdist: what a hung test shows, and how
its worker gets past it (pytest-timeout's `timeout_method = signal`, taken over here).

The signal method fails the test with the main thread's stack, which for an asyncio test is
only the event loop waiting in select(): the failure here also shows where each of the loop's
tasks waits. The thread method ends the process after writing every stack to stdout, which
an xdist worker discards. So the process is ended only as a last resort, when the test has
still not finished GRACE_SECONDS after its timeout (its teardown stuck as well, or a wait in C
that no signal interrupts, such as a blocking libpq call), with every stack on stderr, which
reaches the terminal from a worker too."""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import threading
import traceback
from types import FrameType
from typing import Any

import pytest
import pytest_timeout

GRACE_SECONDS = 60.0  # after a timeout, for the teardown; then the process ends
FRAME = ("cr_frame", "gi_frame", "ag_frame")  # a coroutine's, a generator's, an async one's
AWAITS = ("cr_await", "gi_yieldfrom", "ag_await")  # what each awaits


def first_attribute(value: Any, names: tuple[str, ...]) -> Any:
    return next((getattr(value, n) for n in names if getattr(value, n, None) is not None), None)


def awaited_frames(awaitable: Any) -> tuple[list[FrameType], Any]:
    """The frames of a coroutine and of what it awaits in turn, outermost first, and the
    innermost thing awaited that has no frame (a future, a task), if any."""
    frames: list[FrameType] = []
    while (frame := first_attribute(awaitable, FRAME)) is not None:
        frames.append(frame)
        awaitable = first_attribute(awaitable, AWAITS)
    return frames, awaitable


def task_stacks(loop: asyncio.AbstractEventLoop) -> str:
    """Where each task of `loop` waits."""
    blocks = []
    for task in sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name()):
        frames, waits_on = awaited_frames(task.get_coro())
        stack = traceback.StackSummary.extract((frame, frame.f_lineno) for frame in frames)
        waiting = f"  awaiting {waits_on!r}\n" if waits_on is not None else ""
        blocks.append(f"--- task {task.get_name()}\n{''.join(stack.format())}{waiting}")
    return "".join(blocks)


def main_thread_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop the main thread is running, if it is in one (seen from another thread)."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, asyncio.AbstractEventLoop):
            return candidate
        frame = frame.f_back
    return None


WATCHDOG = pytest.StashKey[threading.Timer]()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own timer

    def expired(_signum: int, _frame: FrameType | None) -> None:
        if not settings.disable_debugger_detection and pytest_timeout.is_debugging():
            return
        try:
            tasks = task_stacks(asyncio.get_running_loop())
        except RuntimeError:  # no loop running (a sync test): the failure's traceback says
            tasks = ""
        where = f"; where the event loop's tasks wait:\n{tasks}" if tasks else ""
        pytest.fail(f"Timeout >{settings.timeout}s{where}")

    def cancel() -> None:  # at the end of the test, and when it fails (before its teardown)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout calls it
    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    if not item.config.option.usepdb:  # nobody sits in a debugger meanwhile
        watchdog = threading.Timer(settings.timeout + GRACE_SECONDS, end_process, (item,))
        watchdog.daemon = True
        watchdog.start()
        item.stash[WATCHDOG] = watchdog
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Any:
    """The watchdog outlives pytest-timeout's alarm, which a failure stops before teardown."""
    try:
        return (yield)
    finally:
        watchdog = item.stash.get(WATCHDOG, None)
        if watchdog is not None:
            watchdog.cancel()


def end_process(item: pytest.Item) -> None:
    """Write what the test wrote and where every task and thread waits to stderr; exit."""
    capture = item.config.pluginmanager.getplugin("capturemanager")
    out, err = "", ""
    if capture is not None:  # stderr is the terminal again
        capture.suspend_global_capture(in_=True)
        out, err = capture.read_global_capture()
    loop = main_thread_loop()
    tasks = task_stacks(loop) if loop is not None else ""
    title = f" {item.nodeid}: not done {GRACE_SECONDS:.0f} s after its timeout: ending "
    sys.stderr.write(f"\n{title:+^100}\n{out}{err}{tasks}")
    sys.stderr.flush()
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(1)
