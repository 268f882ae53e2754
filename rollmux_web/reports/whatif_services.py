"""What-if runs, write side: create a run and queue the simulator task after the commit."""

from __future__ import annotations

import threading
from typing import Any

from django.db import connection, transaction

from rollmux_web.accounts.selectors import sees_all_tenants, visible_tenants
from rollmux_web.reports.models import WhatIfRun
from rollmux_web.reports.tasks import run_whatif as run_whatif_task


def run_tenant(user: Any) -> str:
    """Return whose turn a user's runs take in the fair queue: their tenants ("" for admins
    and finance, who see every tenant)."""
    if sees_all_tenants(user):
        return ""
    return ",".join(visible_tenants(user).order_by("name").values_list("name", flat=True))


def whatif_start(
    *, user: Any, source: str, trace_text: str, policies: list[str], seed: int
) -> WhatIfRun:
    """Create a what-if run and queue the simulator task after the commit."""
    tenant = run_tenant(user)
    with transaction.atomic():
        run = WhatIfRun.objects.create(
            created_by=user,
            tenant=tenant,
            source=source,
            trace_text=trace_text,
            policies=policies,
            seed=seed,
        )
        if run_whatif_task.app.conf.task_always_eager:
            # Embedded mode runs tasks in this process: a simulation can take minutes, so
            # it gets a thread of its own; the request returns and the run's page polls
            # its progress, as with a worker.
            transaction.on_commit(lambda: _simulate_on_a_thread(run.pk))
        else:
            transaction.on_commit(lambda: run_whatif_task.delay(run.pk))
    return run


def _simulate_on_a_thread(run_id: int) -> None:
    def run() -> None:
        try:
            run_whatif_task(run_id)
        finally:
            connection.close()  # this thread's own connection

    threading.Thread(target=run, name=f"rollmux-whatif-{run_id}", daemon=True).start()
