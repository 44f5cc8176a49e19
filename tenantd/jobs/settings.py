"""The job queue's settings section."""

from __future__ import annotations

from typing import ClassVar

from tenantd.settings import SWITCH, Flag, Interval, Positive, Seconds, Section, env


class JobSettings(Section):
    """Deferred work: the durable queue and the worker pool of every `tenantd serve`."""

    title: ClassVar[str] = "Jobs"

    queues_enabled: Flag = env(
        "QUEUES_ENABLED",
        "true: deferred work (notification dispatch, mail) goes through the durable job queue"
        " that every instance's worker pool takes from; false: it runs in the process right"
        " after the commit.",
        default=False,
        json_schema_extra=SWITCH,
    )
    lease_seconds: Positive = env(
        "JOB_LEASE_SECONDS",
        "Lease of a claimed job; a job whose lease ran out is claimed again by any instance.",
        default=30,
    )
    concurrency: Positive = env(
        "TENANTD_JOB_CONCURRENCY",
        "Job runner (QUEUES_ENABLED=true: every `tenantd serve` runs a worker pool): jobs"
        " running at once per process, jobs claimed per round trip, idle wait between claims,"
        " first retry delay (doubling each attempt) and its cap.",
        default=64,
    )
    batch_size: Positive = env("TENANTD_JOB_BATCH_SIZE", default=64)
    poll_seconds: Interval = env("TENANTD_JOB_POLL_SECONDS", default=0.5)
    retry_base_seconds: Seconds = env("TENANTD_JOB_RETRY_BASE_SECONDS", default=2.0)
    retry_max_seconds: Seconds = env("TENANTD_JOB_RETRY_MAX_SECONDS", default=3600.0)
    stop_timeout_seconds: Seconds = env(
        "TENANTD_JOB_STOP_TIMEOUT_SECONDS",
        "Graceful stop: running jobs get this long, then go back to the queue.",
        default=10.0,
    )
