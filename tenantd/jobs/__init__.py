"""Deferred work: one enqueue call that takes effect after commit (jobs/queue.py), a durable
queue (QUEUES_ENABLED) run by an in-process aiojobs worker pool (jobs/runner.py)."""

from tenantd.jobs.kinds import BoundKind, JobInfo, JobKind, PermanentJobError
from tenantd.jobs.queue import JobQueue

__all__ = ["BoundKind", "JobInfo", "JobKind", "JobQueue", "PermanentJobError"]
