"""A worker process for the crash test: the job runner alone, against DATABASE_URL.

Dispatch jobs pause a little before and after their work, so a kill -9 lands both in the
middle of jobs and between a job's commit and its completion.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from tenantd.app.bundle import Domains, open_services
from tenantd.app.plugins import JOB_KINDS
from tenantd.app.settings import load_settings
from tenantd.jobs.kinds import JobInfo, JobKind
from tenantd.jobs.runner import JobRunner


async def main() -> None:
    settings = load_settings()
    assert settings.database.url
    async with open_services(settings, settings.database.url) as services:
        [dispatch] = [kind for kind in JOB_KINDS if kind.name == "notifications.dispatch"]

        async def slow(svc: Domains, payload: dict[str, Any], info: JobInfo) -> None:
            await asyncio.sleep(random.uniform(0, 0.01))
            await dispatch.run(svc, payload, info)
            await asyncio.sleep(random.uniform(0, 0.02))

        assert dispatch.run_batch is not None
        run_batch = dispatch.run_batch

        async def slow_batch(
            svc: Domains, items: list[tuple[JobInfo, dict[str, Any]]]
        ) -> list[BaseException | None]:
            await asyncio.sleep(random.uniform(0, 0.01))
            results = await run_batch(svc, items)
            await asyncio.sleep(random.uniform(0, 0.02))
            return results

        services.jobs.register(
            JobKind(
                name=dispatch.name,
                run=slow,
                run_batch=slow_batch,
                batch_size=4,
                max_attempts=dispatch.max_attempts,
            )
        )
        runner = JobRunner(services)
        await runner.start()
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
