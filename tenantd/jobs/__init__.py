"""Durable job queue (QUEUES_ENABLED) with an in-process aiojobs worker pool."""

from tenantd.jobs.kinds import JobInfo, JobKind, PermanentJobError
from tenantd.jobs.queue import JobQueue, enqueue, enqueue_many

__all__ = ["JobInfo", "JobKind", "JobQueue", "PermanentJobError", "enqueue", "enqueue_many"]
