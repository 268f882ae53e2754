"""Run retention now, in this process: archive every job due (in bounded batches, each
its own short transaction), then purge old rollups and audit entries. The beat task
(`rollmux_web.workflow.tasks.retention_sweep`) does the same a few batches at a time; this
is for embedded mode (no beat) and for an operator catching up."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from rollmux_web.workflow.services import retention


class Command(BaseCommand):
    help = "Archive phase records past ROLLMUX_PHASE_RETENTION_DAYS; purge old rollups and audit."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--max-batches", type=int, default=1000)

    def handle(self, *args: Any, max_batches: int, **options: Any) -> None:
        now = timezone.now()
        jobs = phases = 0
        for _ in range(max_batches):
            batches = retention.eligible_batches(now)
            if not batches:
                break
            result = retention.archive_jobs(batches[0], now=now)
            if not result.jobs:
                break  # the batch's jobs were not due after all: nothing more to do
            jobs += len(result.jobs)
            phases += result.phases
        purged = 0
        while n := retention.purge_rollups(now):
            purged += n
        audit = 0
        while n := retention.purge_audit(now):
            audit += n
        self.stdout.write(
            f"archived {phases} phase records of {jobs} jobs; purged {purged} rollups,"
            f" {audit} audit entries"
        )
