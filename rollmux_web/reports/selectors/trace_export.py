"""Chrome/Perfetto trace export of a group's or a job's phases."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q

from rollmux_web.formatting import iteration_number
from rollmux_web.inventory.models import Node, PoolKind
from rollmux_web.reports.selectors.timeline_queries import group_labels, phase_rows
from rollmux_web.reports.timeline import NO_LABEL, PhaseRow
from rollmux_web.workflow.access import group_get_for_user, job_get_for_user
from rollmux_web.workflow.models import NodeAllocation

POOL_PIDS = {PoolKind.ROLLOUT.value: 1, PoolKind.TRAIN.value: 2}


def trace_events(
    rows: Sequence[PhaseRow],
    pools: dict[str, str],
    labels: dict[int, str],
    *,
    masked: frozenset[int] = frozenset(),
) -> dict[str, Any]:
    """Return Chrome/Perfetto trace JSON: one complete ("X") event per phase and node.

    pid = pool, tid = node; ts and dur in microseconds since the first phase; event names
    count iterations from 1 (as the job page), `args.iteration` is the record's (0-based);
    `args` also has the Ray node id and GPU ids per node and a sync's `bytes_moved` where
    recorded. A phase of a job in `masked` (another tenant's) carries its label, kind, times
    and nodes only: no job id, phase id, iteration number, Ray placement or bytes.
    """
    events: list[dict[str, Any]] = []
    tids: dict[str, int] = {}
    base = min((r.started for r in rows), default=None)
    for pool, pid in POOL_PIDS.items():
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "tid": 0,
                "args": {"name": "Rollout pool" if pool == "rollout" else "Training pool"},
            }
        )
    for row in rows:
        phase_id, jid, it, kind, nodes, warm, s, f, state, _outcome, profile = row[:11]
        if f is None or base is None:
            continue
        hidden = jid in masked
        label = labels.get(jid, NO_LABEL)
        args: dict[str, Any] = (
            {"warm_start": warm, "state": state}
            if hidden
            else {"phase_id": phase_id, "job_id": jid, "iteration": it, "warm_start": warm}
            | {"state": state}
        )
        args["started_at"] = datetime.fromtimestamp(s, tz=UTC).isoformat()
        if profile:
            args["stage"] = "profile"  # the job's profiling run
        if not hidden:
            # where Ray ran it: per inventory node its Ray node id and GPU ids; a weight
            # sync's bytes (another tenant's job: none of it, its size would tell its model)
            if row.ray_node_ids:
                args["ray_node_ids"] = row.ray_node_ids
            if row.gpu_ids:
                args["gpu_ids"] = row.gpu_ids
            if row.bytes_moved is not None:
                args["bytes_moved"] = row.bytes_moved
        for n in nodes:
            pool = pools.get(n, "rollout" if kind == "rollout" else "train")
            if n not in tids:
                tids[n] = len(tids) + 1
                events.append(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": POOL_PIDS.get(pool, 3),
                        "tid": tids[n],
                        "args": {"name": n},
                    }
                )
            events.append(
                {
                    "name": (
                        f"{label} {kind}" if hidden else f"{label} {kind} #{iteration_number(it)}"
                    )
                    + (" (profiling run)" if profile else ""),
                    "cat": f"profile,{kind}" if profile else kind,
                    "ph": "X",
                    "ts": round((s - base) * 1e6),
                    "dur": round((f - s) * 1e6),
                    "pid": POOL_PIDS.get(pool, 3),
                    "tid": tids[n],
                    "args": args,
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def group_trace(*, user: Any, group_id: int) -> dict[str, Any]:
    """Return the whole group as Chrome/Perfetto trace JSON (other tenants' jobs masked)."""
    group = group_get_for_user(user=user, group_id=group_id)
    rows = phase_rows(Q(group_id=group.pk), None, None)
    pools = dict(
        NodeAllocation.objects.filter(group=group).values_list("node__name", "node__cluster__kind")
    )
    labels, masked = group_labels(user, group)
    return trace_events(rows, pools, labels, masked=masked)


def job_trace(*, user: Any, job_id: int) -> dict[str, Any]:
    """Return one job's phases as Chrome/Perfetto trace JSON."""
    job = job_get_for_user(user=user, job_id=job_id)
    rows = phase_rows(Q(job_id=job.pk), None, None)
    names = {n for r in rows for n in r.nodes}
    pools = dict(Node.objects.filter(name__in=names).values_list("name", "cluster__kind"))
    return trace_events(rows, pools, {job.pk: job.name})
