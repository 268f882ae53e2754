"""The planner's configuration: one frozen, grouped dataclass with ONE set of defaults.

`PlannerConfig()` is what ships: the levers the simulator's rollmux and the live planner
run (docs/results.md, the levers of issue 14 and drift re-planning). `ALGORITHM1` is the
paper's published Algorithm 1 (placement once at arrival, no levers), derived from it.

    admission      how an arriving (or moving) job is placed: Algorithm 1 and its options
    consolidation  moves of running jobs when a member leaves a group (and the ski-rental
                   re-plan of a job alone)
    replan         drift re-planning: a running job whose phases leave its estimates
    runtime        inside a co-execution group: long-tail migration

The `ROLLMUX_*` environment variables that set it are one table, `OPTIONS` (name, field,
type, bounds, help; the default is the dataclass's), in the pattern of Ray's
`ray_option_utils`: the web app's settings read them through `read_env`, and
`reference_markdown` writes docs/planner-configuration.md from the same rows
(`python -m scheduler.config > docs/planner-configuration.md`; a test compares).

Standard library only: the web app's settings import it at start-up.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

__all__ = [
    "ALGORITHM1",
    "OBJECTIVES",
    "OPTIONS",
    "Admission",
    "Consolidation",
    "Option",
    "PlannerConfig",
    "Replan",
    "Runtime",
    "config_from_env",
    "read_env",
    "reference_markdown",
]

OBJECTIVES = ("expected", "marginal")
# the distribution-aware SLO check's margin on the others' expected durations (scheduler.slo)
DEFAULT_SLO_MARGIN = 0.03
# a sharing member whose SLO slack (slo - 1) is below this must keep its SLO on its worst-case
# iteration time against its expected solo time (scheduler.slo)
DEFAULT_TIGHT_SLACK = 0.1
# [I] the movers' budget under drift re-planning holds were their remaining run this much
# shorter (the strongest decreasing template's end scale; scheduler.replan)
DRIFT_HEDGE = 1.0 / 2.5


@dataclass(frozen=True)
class Admission:
    """How Algorithm 1 places a job (scheduler.planner.place)."""

    # rank admissible placements by expected remaining cost ("expected",
    # scheduler.planner.objective) or by the marginal $/h they add ("marginal", the paper's)
    objective: str = "expected"
    # Algorithm 1's line 4 (skip a saturated group); with consolidation the SLO check alone
    # admits more and costs less (docs/results.md), every SLO still planned
    prune_saturated: bool = False
    # the 4th strategy: alone on its training nodes when cheapest (moves and lone jobs)
    colocated: bool = True
    # [I] may an ARRIVAL go co-located (False: only a lone job, at a consolidation)
    colocated_on_arrival: bool = False
    max_group_size: int = 5
    # scheduler.slo's margin; None: the paper's worst-case check alone
    slo_margin: float | None = DEFAULT_SLO_MARGIN
    # a sharing member whose SLO slack (slo - 1) is below this must keep its SLO on its
    # worst-case iteration time in the group against its expected solo time (0: never)
    tight_slack: float = DEFAULT_TIGHT_SLACK
    # refuse a placement that gives a member a lower chance of its SLO (None: no floor)
    min_slo_probability: float | None = None
    # value a member the others' departures leave alone as going co-located after the
    # ski-rental wait (objective "expected", with the co-located strategy)
    lone_tail: bool = True


@dataclass(frozen=True)
class Consolidation:
    """Moves of survivors when a member leaves (scheduler.planner.consolidation)."""

    enabled: bool = True
    max_moves_per_job: int = 2
    singletons: bool = True  # also try the members of one-member groups
    small_groups: int = 0  # also the members of groups this small (0: singletons only)
    # consolidate on EVERY departure, also one that empties its group: its freed nodes may
    # serve the jobs alone elsewhere
    every_departure: bool = True
    # on a cluster whose pools are unbounded, a departure asks the jobs alone elsewhere only
    # when a group that changed since the previous pass is an option for them (rule 9):
    # nothing else about their options changed but the clock, and their own re-plans
    # after the ski-rental wait (`lone_wait`) follow the clock
    changed_options_only: bool = True
    # the movers' SLO budget at z standard errors of their drawn solo time (None: the
    # reference expected solo / (1 + solo_margin)); consolidation rule 4
    budget_z: float | None = 3.0
    solo_margin: float = 0.01
    # a job alone in a disaggregated group is re-planned after this x the ski-rental wait
    # (consolidation.lone_wait_s); None: only at departures
    lone_wait: float | None = 1.0
    lone_tail_moves: bool = True  # the lone-tail value in a move's saving too
    min_saving_usd: float = 0.0  # a move must save more than this (expected dollars)
    # a job's restart time (None: consolidation.restart_seconds, a function of model size)
    restart_s: Callable[[Any], float] | None = None


@dataclass(frozen=True)
class Replan:
    """Drift re-planning of running jobs (scheduler.replan)."""

    enabled: bool = True
    # a move's SLO budget must also hold were the mover's remaining run this much shorter;
    # applies while re-planning is on (`PlannerConfig.drift_hedge`)
    hedge: float = DRIFT_HEDGE
    # live trigger: a phase slower than its declared worst case by more than this share
    tolerance: float = 0.1


@dataclass(frozen=True)
class Runtime:
    """Inside a co-execution group."""

    # long-tail migration once this share of a rollout's responses is done (0: off)
    long_tail_threshold: float = 0.8


# the flat names `PlannerConfig.with_` accepts: name -> (group, field)
_FLAT: dict[str, tuple[str, str]] = {}


@dataclass(frozen=True)
class PlannerConfig:
    """The planner's configuration (module docstring); its defaults are what ships."""

    admission: Admission = field(default_factory=Admission)
    consolidation: Consolidation = field(default_factory=Consolidation)
    replan: Replan = field(default_factory=Replan)
    runtime: Runtime = field(default_factory=Runtime)

    def with_(self, **changes: Any) -> PlannerConfig:
        """Return a copy with fields changed by their group-qualified ("admission.objective")
        or, where unambiguous, bare ("objective") names; an unknown name is a TypeError."""
        grouped: dict[str, dict[str, Any]] = {}
        for name, value in changes.items():
            key = name.replace("__", ".")
            if "." in key:
                group, attr = key.split(".", 1)
            elif key in _FLAT:
                group, attr = _FLAT[key]
            else:
                raise TypeError(f"PlannerConfig has no field {name!r}")
            if attr not in {f.name for f in fields(getattr(self, group))}:
                raise TypeError(f"PlannerConfig.{group} has no field {attr!r}")
            grouped.setdefault(group, {})[attr] = value
        return replace(self, **{g: replace(getattr(self, g), **kv) for g, kv in grouped.items()})

    def get(self, path: str) -> Any:
        """Return the field at `path` ("group.field")."""
        group, attr = path.split(".", 1)
        return getattr(getattr(self, group), attr)

    @property
    def drift_hedge(self) -> float:
        """Return the movers' hedge in force: `replan.hedge` while re-planning, else 1 (off)."""
        return self.replan.hedge if self.replan.enabled else 1.0

    @property
    def long_tail(self) -> bool:
        """Return True when long-tail migration runs inside groups."""
        return self.runtime.long_tail_threshold > 0


for _group in fields(PlannerConfig):
    for _f in fields(getattr(PlannerConfig(), _group.name)):
        _FLAT.setdefault(_f.name, (_group.name, _f.name))
# names two groups share are not bare names (only `enabled`, ambiguous)
_FLAT.pop("enabled", None)

# Algorithm 1 as the paper publishes it: placement once at arrival, no levers (the ablation
# baseline of docs/results.md; also what `scheduler.planner.place` does without a config)
ALGORITHM1 = PlannerConfig().with_(
    objective="marginal",
    prune_saturated=True,
    colocated=False,
    consolidation__enabled=False,
    replan__enabled=False,
    long_tail_threshold=0.0,
)


# --- the environment variables (one table) -------------------------------------------


@dataclass(frozen=True)
class Option:
    """One `ROLLMUX_*` variable: the field it sets, its type and bounds, and its help."""

    env: str
    path: str  # "group.field" of PlannerConfig
    type: type
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def default(self) -> Any:
        """Return the field's default: the dataclass's (the only defaults)."""
        return PlannerConfig().get(self.path)

    def parse(self, raw: str) -> Any:
        """Return `raw` as this option's value; a ValueError names the variable and bound."""
        text = raw.strip()
        if self.type is bool:
            lowered = text.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"Unexpected value {self.env}={raw!r}: use true or false")
        if self.type is str:
            if self.choices and text not in self.choices:
                raise ValueError(
                    f"Unexpected value {self.env}={raw!r}: use {' or '.join(self.choices)}"
                )
            return text
        try:
            value = self.type(text)
        except ValueError:
            kind = "an integer" if self.type is int else "a number"
            raise ValueError(f"Unexpected value {self.env}={raw!r}: expected {kind}") from None
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"Unexpected value {self.env}={raw!r}: must be >= {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"Unexpected value {self.env}={raw!r}: must be <= {self.maximum}")
        return value

    def bounds(self) -> str:
        """Return the bounds in words, for the reference."""
        if self.choices:
            return " or ".join(f"`{c}`" for c in self.choices)
        if self.type is bool:
            return "true / false"
        low = "" if self.minimum is None else f">= {self.minimum:g}"
        high = "" if self.maximum is None else f"<= {self.maximum:g}"
        return ", ".join(x for x in (low, high) if x) or "any"


OPTIONS: tuple[Option, ...] = (
    Option(
        "ROLLMUX_MAX_GROUP_SIZE",
        "admission.max_group_size",
        int,
        "Most jobs in one co-execution group.",
        minimum=1,
    ),
    Option(
        "ROLLMUX_PLANNER_OBJECTIVE",
        "admission.objective",
        str,
        "Rank admissible placements by the expected remaining cost they add, or by the "
        "marginal $/h (the paper's).",
        choices=OBJECTIVES,
    ),
    Option(
        "ROLLMUX_PLANNER_PRUNE_SATURATED",
        "admission.prune_saturated",
        bool,
        "Skip saturated groups (Algorithm 1's line 4); off, the SLO check alone decides.",
    ),
    Option(
        "ROLLMUX_COLOCATED",
        "admission.colocated",
        bool,
        "Allow the co-located strategy (a job alone on its training nodes), for moves and "
        "jobs left alone.",
    ),
    Option(
        "ROLLMUX_COLOCATED_ON_ARRIVAL",
        "admission.colocated_on_arrival",
        bool,
        "Let an arriving job go co-located at once (with ROLLMUX_COLOCATED).",
    ),
    Option(
        "ROLLMUX_TIGHT_SLACK",
        "admission.tight_slack",
        float,
        "A job sharing a group whose SLO slack (slo - 1) is below this must keep its SLO "
        "with every phase at its worst case against its expected solo time (0: never).",
        minimum=0.0,
    ),
    Option(
        "ROLLMUX_CONSOLIDATION",
        "consolidation.enabled",
        bool,
        "Move survivors between groups when a member leaves (consolidation on departure).",
    ),
    Option(
        "ROLLMUX_MAX_MOVES_PER_JOB",
        "consolidation.max_moves_per_job",
        int,
        "Most moves of one job, consolidation and drift re-plans together (0: never move).",
        minimum=0,
    ),
    Option(
        "ROLLMUX_DRIFT_REPLAN",
        "replan.enabled",
        bool,
        "Re-plan a running job whose observed phases leave its estimates (move it out, or "
        "let it yield, when its group's SLOs no longer hold to the end of their runs).",
    ),
    Option(
        "ROLLMUX_DRIFT_TOLERANCE",
        "replan.tolerance",
        float,
        'A phase slower than its declared worst case by more than this share: "drifting".',
        minimum=0.0,
    ),
    Option(
        "ROLLMUX_LONG_TAIL_THRESHOLD",
        "runtime.long_tail_threshold",
        float,
        "Long-tail migration once this share of a rollout's responses is done (0: off).",
        minimum=0.0,
        maximum=1.0,
    ),
)


def read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Return every option's value by its variable name: from `environ` when set and not
    empty, else its default. A bad value raises ValueError naming the variable and bound."""
    out: dict[str, Any] = {}
    for opt in OPTIONS:
        raw = environ.get(opt.env, "")
        out[opt.env] = opt.parse(raw) if raw != "" else opt.default
    return out


def config_from_env(values: Mapping[str, Any], base: PlannerConfig | None = None) -> PlannerConfig:
    """Return `base` (default: the shipped config) with each option of `values` (by variable
    name, as `read_env` returns them; absent ones keep the base's) set."""
    changes = {opt.path: values[opt.env] for opt in OPTIONS if opt.env in values}
    return (base or PlannerConfig()).with_(**changes)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def reference_markdown() -> str:
    """Return docs/planner-configuration.md: the table of OPTIONS and the config's groups."""
    lines = [
        "# Planner configuration",
        "",
        "<!-- generated by `python -m scheduler.config > docs/planner-configuration.md`;",
        "     do not edit: tests/scheduler/test_config.py compares it with the table -->",
        "",
        "One frozen configuration, `scheduler.config.PlannerConfig`, holds the planner's",
        "knobs with one set of defaults: what the simulator's rollmux and the live planner",
        "run. `ALGORITHM1` is the paper's published Algorithm 1 (no levers). The live",
        "planner reads these environment variables (unset or empty: the default); a bad",
        "value stops start-up with the variable and the bound named.",
        "",
        "| variable | field | type | bounds | default | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for opt in OPTIONS:
        lines.append(
            f"| `{opt.env}` | `{opt.path}` | {opt.type.__name__} | {opt.bounds()} "
            f"| `{_cell(opt.default)}` | {opt.help} |"
        )
    lines += [
        "",
        "Fields without a variable are set in code (`PlannerConfig().with_(...)`), e.g. by",
        "the benchmarks' ablations:",
        "",
        "| field | default | Algorithm 1 |",
        "|---|---|---|",
    ]
    shipped, paper = PlannerConfig(), ALGORITHM1
    exposed = {opt.path for opt in OPTIONS}
    for group in fields(PlannerConfig):
        for f in fields(getattr(shipped, group.name)):
            path = f"{group.name}.{f.name}"
            if path in exposed or f.name == "restart_s":
                continue
            lines.append(
                f"| `{path}` | `{_cell(shipped.get(path))}` | `{_cell(paper.get(path))}` |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
