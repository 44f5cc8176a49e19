"""`tenantd sweep`: run the periodic clean-ups once (from cron), the same functions the
scheduler of `tenantd serve` runs, under the same advisory locks."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import asdict

import typer
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from tenantd.app.plugins import registered_sweeps
from tenantd.bundle import Services
from tenantd.cli.common import console, fail, print_json, print_table, with_services
from tenantd.ops.config import SchedulerSettings
from tenantd.ops.sweeps import BatchCallback, SweepOutcome, run_sweep

SWEEP_NAMES = tuple(registered_sweeps())

STATUS_TEXT = {
    "ok": "done",
    "dry_run": "dry run (nothing changed)",
    "failed": "FAILED",
    "interrupted": "interrupted",
    "locked": "skipped: running on another instance",
    "not_due": "skipped: not due",
    "unavailable": "FAILED: not available in this build",
}


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[BatchCallback]:
    """A rich progress display on a terminal; plain lines (cron logs) otherwise."""
    totals: dict[tuple[str, str], int] = {}
    if not enabled:

        def plain(sweep: str, table: str, rows: int) -> None:
            totals[(sweep, table)] = totals.get((sweep, table), 0) + rows
            sys.stdout.write(f"{sweep}: {table} +{rows} ({totals[(sweep, table)]})\n")
            sys.stdout.flush()

        yield plain
        return
    tasks: dict[tuple[str, str], TaskID] = {}
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.completed:,.0f} rows"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:

        def rich_batch(sweep: str, table: str, rows: int) -> None:
            key = (sweep, table)
            if key not in tasks:
                tasks[key] = progress.add_task(f"{sweep}: {table}", total=None)
            progress.advance(tasks[key], rows)

        yield rich_batch


def sweep(
    name: str = typer.Argument(
        "all", help=f"Which sweep: all, {', '.join(SWEEP_NAMES)}.", show_default=True
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Count what would be removed; change nothing."
    ),
    batch_size: int | None = typer.Option(
        None, "--batch-size", min=1, help="Rows per batch (default TENANTD_SWEEP_BATCH_SIZE)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the outcomes as JSON."),
    env_file: str | None = typer.Option(None, "--env-file", help="KEY=value file to load."),
) -> None:
    """Run the sweeps once (for cron), as the scheduler of `tenantd serve` does.

    Sweeps: expired invitations, purged accounts, dedup keys, expired sessions
    and tokens (with rate-limit windows and webhook ids), finished jobs.

    Each sweep takes its advisory lock, so a run overlapping the scheduler
    of a running instance (or another cron host) skips that sweep instead
    of doing it twice. Deletes go in bounded batches. Exit status 0 when
    every sweep succeeded or was skipped, 1 when one failed, 2 on bad usage.

    Examples:
      tenantd sweep                      # all sweeps
      tenantd sweep sessions --dry-run   # count, change nothing
      tenantd sweep accounts --json
      crontab: 17 3 * * * tenantd --env-file /etc/tenantd/tenantd.env sweep
    """
    if name != "all" and name not in SWEEP_NAMES:
        fail(f"unknown sweep {name!r}; choose all, {', '.join(SWEEP_NAMES)}", 2)
    wanted = list(SWEEP_NAMES) if name == "all" else [name]
    show_progress = sys.stdout.isatty() and not as_json and not dry_run

    async def work(services: Services) -> list[SweepOutcome]:
        available = registered_sweeps()
        config = services.settings.section(SchedulerSettings)
        outcomes = []
        with _progress(show_progress) as on_batch:
            for sweep_name in wanted:
                found = available.get(sweep_name)
                if found is None:
                    outcomes.append(SweepOutcome(sweep_name, "unavailable"))
                    continue
                outcomes.append(
                    await run_sweep(
                        services,
                        found,
                        dry_run=dry_run,
                        batch_size=batch_size or config.batch_size,
                        batch_pause=config.batch_pause_ms / 1000,
                        # A dry run's counts are its plan: the table prints it, once.
                        on_batch=None if as_json or dry_run else on_batch,
                    )
                )
        return outcomes

    outcomes = with_services(work, env_file=env_file)
    if as_json:
        print_json([asdict(outcome) for outcome in outcomes])
    else:
        rows = []
        for outcome in outcomes:
            status = STATUS_TEXT.get(outcome.status, outcome.status)
            if outcome.error:
                status = f"{status}: {outcome.error}"
            if not outcome.counts:
                rows.append((outcome.name, status, "", ""))
            for table, count in outcome.counts.items():
                rows.append((outcome.name, status, table, f"{count:,}"))
        title = "Sweep (dry run)" if dry_run else "Sweep"
        print_table(title, ("sweep", "outcome", "table", "rows"), rows)
    bad = [o for o in outcomes if o.status in {"failed", "interrupted", "unavailable"}]
    if bad:
        fail(f"sweep failed: {', '.join(o.name for o in bad)}", 1)
