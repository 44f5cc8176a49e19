"""Loaded as an event module (TENANTD_EVENT_MODULES) by the crash tests' `tenantd serve`: it
defines no event type and adds the job kind `tests.block` to the kinds the process runs. The
job notes each start (process id, job id, attempt) in the file TENANTD_TEST_JOB_LOG names,
then waits until its payload's `release` file exists, as a job stuck on a slow provider
does."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import tenantd.app.bundle as app_bundle
from tenantd.jobs.kinds import JobInfo, JobKind

EVENTS: list[Any] = []


def _note_start(info: JobInfo) -> None:
    with Path(os.environ["TENANTD_TEST_JOB_LOG"]).open("a") as log:
        log.write(f"{os.getpid()} {info.id} {info.attempts}\n")


def _released(payload: dict[str, Any]) -> bool:
    return Path(payload["release"]).exists()


async def block(services: Any, payload: dict[str, Any], info: JobInfo) -> None:
    _note_start(info)
    # The test (another process) creates the file: polling is the only way to see it.
    while not _released(payload):  # noqa: ASYNC110
        await asyncio.sleep(0.05)


BLOCK = JobKind(name="tests.block", run=block, timeout=600, max_attempts=5)

# The services bundle builds its queue from this tuple after the event modules are loaded.
if BLOCK.name not in {kind.name for kind in app_bundle.JOB_KINDS}:
    app_bundle.JOB_KINDS = (*app_bundle.JOB_KINDS, BLOCK)
