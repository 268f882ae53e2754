"""What the `rollmux` command line prints: tables, dumps and the views of API objects."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from rollmux_web import formatting

GAP = "  "  # between table columns


# --- formatting ----------------------------------------------------------------------------


def _fit(text: str, width: int) -> str:
    """Shorten text to width with an ellipsis in the middle (a name's suffix tells jobs apart)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    keep = width - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2 :]


def _utc(stamp: str | None) -> str:
    """Return an API timestamp as 'YYYY-MM-DD HH:MM:SSZ' (UTC)."""
    if not stamp:
        return "-"
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S}Z"


def _duration(seconds: float | None) -> str:
    """Return a duration as every page writes it (rollmux_web.formatting), "-" if unknown."""
    return "-" if seconds is None else formatting.duration(seconds)


def _terminal_width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[dict[str, Any]], Any]
    right: bool = False
    flexible: bool = False  # gets the room the others leave (names); at most MAX_FLEX
    cap: int = 24


MIN_FLEX, MAX_FLEX = 12, 48


def render_table(
    columns: list[Column], rows: list[dict[str, Any]], width: int | None = None
) -> str:
    """Return rows as aligned columns. Every cell is cut to its column's width (a long name
    is shortened in the middle), so no value ever runs into the next column."""
    cells = [[str(c.value(r)) if c.value(r) is not None else "-" for c in columns] for r in rows]
    widths = []
    for i, c in enumerate(columns):
        longest = max([len(c.header), *(len(row[i]) for row in cells)])
        widths.append(longest if c.flexible else min(longest, max(c.cap, len(c.header))))
    total = width or _terminal_width()
    fixed = sum(w for w, c in zip(widths, columns, strict=True) if not c.flexible)
    room = total - fixed - len(GAP) * (len(columns) - 1)
    for i, c in enumerate(columns):
        if c.flexible:
            widths[i] = max(len(c.header), min(widths[i], MAX_FLEX, max(room, MIN_FLEX)))

    def line(values: list[str]) -> str:
        out = []
        for value, w, c in zip(values, widths, columns, strict=True):
            text = _fit(value, w)
            out.append(text.rjust(w) if c.right else text.ljust(w))
        return GAP.join(out).rstrip()

    return "\n".join([line([c.header for c in columns]), *(line(row) for row in cells)])


def dump(data: Any, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip()


def _wrap(label: str, value: Any, indent: int = 0) -> list[str]:
    """Return `Label:  value` lines, the value wrapped under itself at the terminal width."""
    pad = " " * indent
    head = f"{pad}{label + ':':<21} "  # (a label of 21 characters or more keeps a space)
    text = "-" if value in (None, "") else str(value)
    width = max(_terminal_width() - len(head), 30)
    lines = textwrap.wrap(text, width) or [""]
    return [head + lines[0], *(" " * len(head) + rest for rest in lines[1:])]


# --- views of API objects ------------------------------------------------------------------

JOB_COLUMNS = [
    Column("ID", lambda j: j["id"], right=True, cap=8),
    Column("NAME", lambda j: j["name"], flexible=True),
    Column("TENANT", lambda j: j["tenant"], cap=12),
    Column("STATUS", lambda j: j["status"], cap=10),
    Column("ITER", lambda j: f"{j['iterations_done']}/{j['iterations']}", right=True, cap=13),
    Column("GROUP", lambda j: j.get("group"), right=True, cap=6),
    Column("SUBMITTED (UTC)", lambda j: _utc(j.get("submitted_at")), cap=20),
]


def _members(group: dict[str, Any]) -> str:
    active = [m for m in group.get("members", []) if m.get("active", True)]
    names = [m["name"] for m in active if not m.get("hidden")]
    hidden = sum(1 for m in active if m.get("hidden"))
    if hidden:
        names.append(f"+{hidden} of another tenant")
    return ", ".join(names) or "-"


def _t_cycle(group: dict[str, Any]) -> str:
    meta = group.get("meta_iteration") or {}
    return _duration(meta.get("t_cycle_s")) if meta else "-"


GROUP_COLUMNS = [
    Column("ID", lambda g: g["id"], right=True, cap=8),
    Column("STATE", lambda g: "active" if g.get("active") else "released", cap=8),
    Column("MEMBERS", _members, flexible=True),
    Column("ROLLOUT NODES", lambda g: ",".join(g.get("rollout_nodes") or []) or "-", cap=24),
    Column("TRAIN NODES", lambda g: ",".join(g.get("train_nodes") or []) or "-", cap=24),
    Column("T_CYCLE", _t_cycle, right=True, cap=9),
    Column("CREATED (UTC)", lambda g: _utc(g.get("created_at")), cap=20),
]

NODE_COLUMNS = [
    Column("NAME", lambda n: n["name"], flexible=True),
    Column("POOL", lambda n: n.get("cluster"), cap=16),
    Column("GPU TYPE", lambda n: n.get("gpu_type"), cap=10),
    Column("GPUS", lambda n: n.get("gpus"), right=True, cap=5),
    Column("HOST MEM GB", lambda n: f"{n.get('host_mem_gb', 0):g}", right=True, cap=11),
    Column("STATE", lambda n: n.get("state"), cap=8),
]


QUEUE_COLUMNS = [
    Column("POS", lambda q: q["position"], right=True, cap=5),
    Column("ID", lambda q: q.get("id"), right=True, cap=8),
    Column("NAME", lambda q: q["name"], cap=24),
    Column("TENANT", lambda q: q.get("tenant"), cap=12),
    Column("PRIO", lambda q: q.get("priority"), right=True, cap=5),
    Column("WHY", lambda q: q.get("why"), flexible=True),
]


# `get KIND`: the API path and the table's columns
LISTINGS: dict[str, tuple[str, list[Column]]] = {
    "jobs": ("jobs/", JOB_COLUMNS),
    "queue": ("queue/", QUEUE_COLUMNS),
    "groups": ("groups/", GROUP_COLUMNS),
    "nodes": ("nodes/", NODE_COLUMNS),
}


def describe_text(d: dict[str, Any]) -> str:
    """Return a job's description in kubectl-describe form."""
    job, est, phases, cost = d["job"], d["estimates"], d["phases"], d["cost"]
    lines: list[str] = []
    lines += _wrap("Name", job["name"])
    lines += _wrap("ID", job["id"])
    lines += _wrap("Tenant", f"{job['tenant']} (submitted by {job.get('submitter', '-')})")
    lines += _wrap(
        "Status", job["status"] + (" (cancel requested)" if job.get("cancel_requested") else "")
    )
    lines += _wrap("Reason", job.get("reason"))
    queue = d.get("queue")  # only while queued
    if queue:
        lines += _wrap("Queue", f"position {queue['position']}: {queue['why']}")
        if queue.get("waiting") and queue["waiting"] != job.get("reason"):
            lines += _wrap("Waiting", queue["waiting"])  # (the reason says it already)
    if job.get("error") and job["error"] != job.get("reason"):
        lines += _wrap("Error", job["error"])
    lines += _wrap("SLO", f"{job['slo_class']} ({job['slo']:g}x slowdown tolerated)")
    lines += _wrap("Iterations", f"{job['iterations_done']}/{job['iterations']} done")
    lines += _wrap("Attempts", job.get("attempts"))
    lines += _wrap("Runner", job.get("runner"))
    for label, key in (("Submitted", "submitted_at"), ("Placed", "placed_at"),
                       ("Started", "started_at"), ("Finished", "finished_at")):  # fmt: skip
        if job.get(key):
            lines += _wrap(label, _utc(job[key]))
    lines.append("Placement:")
    placement = job.get("placement")
    if placement:
        lines += _wrap("Group", job.get("group"), 2)
        lines += _wrap("Strategy", placement["strategy"].replace("_", " "), 2)
        lines += _wrap("Rollout nodes", ", ".join(placement["rollout_nodes"]) or "-", 2)
        lines += _wrap("Training nodes", ", ".join(placement["train_nodes"]) or "-", 2)
        lines += _wrap("Marginal cost", f"${placement['marginal_cost_per_hour']:.2f}/h", 2)
    else:
        lines.append("  (not placed yet)")
    lines.append("Estimates:")
    slowdown = est.get("predicted_slowdown")
    lines += _wrap(
        "Solo iteration",
        f"{_duration(est['solo_iteration_s'])} worst case (profile time), "
        f"time scale {est['time_scale']:g}x",
        2,
    )
    lines += _wrap(
        "Predicted slowdown",
        f"{slowdown:.3f}x (SLO {est['slo']:g}x)" if slowdown else "- (not placed yet)",
        2,
    )
    if est.get("remaining_wall_s") is not None:
        lines += _wrap(
            "Time left",
            f"~{_duration(est['remaining_wall_s'])} for {est['iterations_left']} iterations",
            2,
        )
    solo = est.get("solo_cost_per_iteration_usd")  # None: no phase times, profiled first
    lines += _wrap(
        "Solo cost/iteration",
        "- (no phase times yet: its profiling run measures them)"
        if solo is None
        else f"${solo:.2f} busy",
        2,
    )
    archived = phases.get("archived")
    lines += _wrap(
        "Phases",
        f"{phases['total']}"
        if not archived
        else f"{phases['total']} in the table; {archived['phases']} archived on "
        f"{archived['archived_at'][:10]} (retention: the job's timeline on the web lists the "
        "files)",
    )
    for kind, k in sorted(phases["by_kind"].items()):
        states = ", ".join(f"{n} {s}" for s, n in sorted(k["states"].items()))
        mean = f", mean {_duration(k['mean_wall_s'])}" if k.get("mean_wall_s") is not None else ""
        lines += _wrap(kind, f"{k['count']} ({states}){mean}, {k['warm_starts']} warm starts", 2)
    last = phases.get("last")
    if last:
        nodes = ", ".join(last["nodes"]) or "-"
        lines += _wrap(
            "Latest",
            f"{last['kind']} of iteration {last['iteration']}: {last['state']} on {nodes}",
            2,
        )
    lines += _training_lines(d.get("training"))
    lines += _wrap(
        "Cost so far",
        f"${cost['total_usd']} (busy ${cost['busy_usd']}, idle share ${cost['idle_usd']}; "
        f"{cost['gpu_hours']} GPU-hours since {cost['since']})",
    )
    return "\n".join(lines)


def _iteration(row: dict[str, Any]) -> int:
    """Return a training row's iteration as the pages show it: the API's `training` rows
    keep the stored 0-based index, people read it counted from 1."""
    return formatting.iteration_number(row["iteration"])


def _training_lines(t: dict[str, Any] | None) -> list[str]:
    """Return describe's Training section: the reward's course and the latest metrics."""
    if not t:
        return []
    latest = t["latest"]
    lines = [f"Training: {t['iterations']} iterations recorded"]
    first = t.get("first_reward")
    if first is not None and latest.get("reward_mean") is not None:
        lines += _wrap(
            "Reward",
            f"{first['reward_mean']:.4g} (iteration {_iteration(first)}) -> "
            f"{latest['reward_mean']:.4g} (iteration {_iteration(latest)}), "
            f"best {t['best_reward_mean']:.4g}",
            2,
        )
    shown = ", ".join(
        f"{name} {latest[name]:.4g}"
        for name in ("reward_mean", "reward_std", "loss", "kl", "entropy", "tokens_per_s",
                     "samples")
        if latest.get(name) is not None
    )  # fmt: skip
    lines += _wrap(
        "Latest", f"iteration {_iteration(latest)} (attempt {latest['attempt']}): {shown}", 2
    )
    return lines


def dry_run_text(d: dict[str, Any]) -> str:
    """Return the planner's answer for a spec in words, as the submit form's preview says it."""
    status = d["status"]
    head = f"Dry run for tenant {d['tenant']} (SLO {d['slo_class']}): nothing was submitted."
    lines = [head]
    if status == "FIT":
        if d.get("group") is not None:
            where = f"joins group {d['group']} by {d['strategy']}"
        elif d.get("strategy") == "new group":
            where = "starts a new co-execution group"
        else:
            where = f"joins an existing group (another tenant's jobs) by {d['strategy']}"
        lines += _wrap("Planner", f"{where}, marginal cost ${d['marginal_cost_per_hour']:.2f}/h")
        lines += _wrap("Rollout nodes", ", ".join(d.get("rollout_nodes") or []) or "-")
        lines += _wrap("Training nodes", ", ".join(d.get("train_nodes") or []) or "-")
        if d.get("new_nodes"):
            lines += _wrap("New nodes", ", ".join(d["new_nodes"]))
        members = d.get("members") or []
        if members:
            lines.append("Predicted slowdowns:")
            rows = [
                {"job": m["label"], "slowdown": f"{m['slowdown']:.3f}x",
                 "slo": f"{m['slo']:g}x" if m.get("slo") else "-"}
                for m in members
            ]  # fmt: skip
            lines.append(textwrap.indent(render_table([
                Column("JOB", lambda r: r["job"], flexible=True),
                Column("SLOWDOWN", lambda r: r["slowdown"], right=True),
                Column("SLO", lambda r: r["slo"], right=True),
            ], rows), "  "))  # fmt: skip
    elif status == "REFUSED":
        lines += _wrap("Would be refused", d["reason"])
    elif status == "INFEASIBLE":
        lines += _wrap("Can never run here", d["reason"])
    elif status == "RETRY":
        lines += _wrap("Would wait", f"(no room now) {d['reason']}")
    elif status == "PROFILE":
        lines += _wrap("Would be profiled first", d.get("reason"))
    else:
        lines += _wrap("No answer", d.get("reason"))
    solo, dedicated = (
        d.get("solo_cost_per_iteration_usd"),
        d.get("dedicated_cost_per_iteration_usd"),
    )
    if solo is None or dedicated is None:
        cost = "- (no phase times yet: its profiling run measures them)"
    else:
        cost = f"${solo:.2f} busy, ${dedicated:.2f} on dedicated pools"
    lines += _wrap("Solo cost/iteration", cost)
    return "\n".join(lines)
