"""Reading a job's payload in the job."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tenantd.jobs.kinds import PermanentJobError


@contextmanager
def malformed_payload_is_permanent(job: str) -> Iterator[None]:
    """A field of the payload missing (KeyError) or malformed (ValueError) fails the `job` for
    good: a retry would read the same payload."""
    try:
        yield
    except (KeyError, ValueError) as error:
        raise PermanentJobError(f"malformed {job} job: {error}") from None
