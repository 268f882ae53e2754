"""Forms of the reports app: date ranges, what-if preview fields and what-if runs."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from rollmux_web.jobs.spec import PHASE_TIME_FIELDS, SPEC, SpecField
from rollmux_web.reports.selectors._time import MAX_RANGE_DAYS

MAX_TRACE_BYTES = 2 * 1024 * 1024


class DateRangeForm(forms.Form):
    """A report range in whole UTC days; at most MAX_RANGE_DAYS, end not before start."""

    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        today = timezone.now().date()
        end = data.get("end") or today
        # the default is the end's calendar month to date (the month the burn-down shows),
        # on its first day too: not a rolling month
        start = data.get("start") or end.replace(day=1)
        if "start" in self.errors or "end" in self.errors:
            return data
        if end == date.max:
            # the range runs to the end of its last day, and no date follows this one
            self.add_error(
                "end", f"The end date {end} is the last day a date can hold; choose an earlier one."
            )
        elif end < start:
            self.add_error("end", f"The end date {end} is before the start date {start}.")
        elif (end - start).days + 1 > MAX_RANGE_DAYS:
            self.add_error(
                "end",
                f"The range is {(end - start).days + 1} days long; "
                f"choose at most {MAX_RANGE_DAYS} days.",
            )
        data["start"], data["end"] = start, end
        return data


def month_shortcuts(today: date, *, months: int = 6) -> list[tuple[str, date, date]]:
    """Return (label, first day, last day) of this month (to date) and the months before it."""
    out = []
    first = today.replace(day=1)
    for i in range(months):
        month_end = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
        last = today if i == 0 else month_end
        label = f"{first:%B %Y}" + (" (to date)" if i == 0 else "")
        out.append((label, first, last))
        first = (first - timedelta(days=1)).replace(day=1)
    return out


# The submit form's fields the planner needs to answer (required for a preview) and the
# optional ones that change its answer; the rest of the spec (model, priority) does not.
PREVIEW_REQUIRED = ("rollout_gpus", "train_gpus", "t_roll_max_s", "t_train_max_s", "host_mem_gb")
PREVIEW_OPTIONAL = (
    "name",
    "slo_class",
    "t_roll_min_s",
    "t_train_min_s",
    "iterations",
    "tenant",
    "runner",  # with time_scale: the job's clock (jobs share a group only at one time scale)
    "time_scale",
)


def _preview_field(f: SpecField) -> forms.Field:
    """Return the form field of a spec field: its type and bounds, required as the preview needs.

    The messages are not shown: a bad value is worded by the submission's own check
    (reports.views._submission_errors), so the hint reads as the form's.
    """
    required = f.name in PREVIEW_REQUIRED
    if f.kind == "text":
        return forms.CharField(required=required, max_length=f.max_length)
    low = f.min_value
    if f.name in ("rollout_gpus", "train_gpus") and low is None:
        low = 1  # the planner places at least one GPU of each pool
    bounds: dict[str, Any] = {"min_value": low, "max_value": f.max_value}
    if f.kind == "int":
        return forms.IntegerField(required=required, **bounds)
    return forms.FloatField(required=required, **bounds)


class PreviewForm(forms.Form):
    """The submit form's fields the planner needs (names as in the trace format), derived
    from the one job-spec field list (`rollmux_web.jobs.spec.SPEC`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        wanted = set(PREVIEW_REQUIRED) | set(PREVIEW_OPTIONAL)
        for f in SPEC:
            if f.name in wanted:
                self.fields[f.name] = _preview_field(f)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for hi, lo in PHASE_TIME_FIELDS:
            if data.get(lo) is not None and data.get(hi) is not None and data[lo] > data[hi]:
                self.add_error(lo, f"must be at most {hi.replace('_', ' ')} ({data[hi]:g} s)")
        return data


class WhatIfForm(forms.Form):
    SOURCES = (("upload", "An uploaded trace (JSON Lines)"), ("queue", "The current queue"))
    POLICIES = (
        ("rollmux", "rollmux"),
        ("solo-disagg", "solo-disagg"),
        ("colocated", "colocated"),
        ("random", "random"),
        ("greedy-most-idle", "greedy-most-idle"),
        ("optimal", "optimal (traces of at most 8 jobs)"),
    )

    source = forms.ChoiceField(choices=SOURCES, initial="upload", widget=forms.RadioSelect)
    trace = forms.FileField(required=False, help_text="the trace format v1, at most 2 MB")
    policies = forms.MultipleChoiceField(
        choices=POLICIES,
        initial=["rollmux", "solo-disagg", "colocated"],
        widget=forms.CheckboxSelectMultiple,
    )
    seed = forms.IntegerField(initial=0, min_value=0, max_value=2**31 - 1)

    def __init__(self, *args: Any, queue_label: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        source = self.fields["source"]
        if queue_label and isinstance(source, forms.ChoiceField):
            # say whose jobs "the current queue" holds for this user
            source.choices = [
                (v, queue_label[0].upper() + queue_label[1:] if v == "queue" else label)
                for v, label in self.SOURCES
            ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("source") == "upload":
            upload = data.get("trace")
            if upload is None:
                if "trace" not in self.errors:  # (an empty file has its own message)
                    self.add_error(
                        "trace", "Choose a trace file to upload (or simulate the queue)."
                    )
            elif upload.size > MAX_TRACE_BYTES:
                self.add_error("trace", f"The file is {upload.size} bytes; at most 2 MB.")
            else:
                raw = upload.read()
                try:
                    data["trace_text"] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    self.add_error("trace", "The file is not UTF-8 text (expected JSON Lines).")
        return data
