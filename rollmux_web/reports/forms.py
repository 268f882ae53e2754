"""Forms of the reports app: date ranges, what-if preview fields and what-if runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.utils import timezone

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
        start = data.get("start") or (
            end.replace(day=1) if end.day > 1 else end - timedelta(days=30)
        )
        if "start" in self.errors or "end" in self.errors:
            return data
        if end < start:
            self.add_error("end", f"The end date {end} is before the start date {start}.")
        elif (end - start).days + 1 > MAX_RANGE_DAYS:
            self.add_error(
                "end",
                f"The range is {(end - start).days + 1} days long; "
                f"choose at most {MAX_RANGE_DAYS} days.",
            )
        data["start"], data["end"] = start, end
        return data


class PreviewForm(forms.Form):
    """The submit form's fields the planner needs (names as in the trace format)."""

    name = forms.CharField(required=False, max_length=128)
    slo_class = forms.CharField(required=False, max_length=32)
    rollout_gpus = forms.IntegerField(min_value=1)
    train_gpus = forms.IntegerField(min_value=1)
    t_roll_max_s = forms.FloatField(min_value=0.001)
    t_roll_min_s = forms.FloatField(required=False, min_value=0.001)
    t_train_max_s = forms.FloatField(min_value=0.001)
    t_train_min_s = forms.FloatField(required=False, min_value=0.001)
    host_mem_gb = forms.FloatField(min_value=0.001)
    iterations = forms.IntegerField(required=False, min_value=1)
    tenant = forms.CharField(required=False, max_length=64)
    # the job's clock: jobs share a group only at one time scale (runner + time_scale)
    runner = forms.CharField(required=False, max_length=200)
    time_scale = forms.FloatField(required=False, min_value=1e-6)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for lo, hi in (("t_roll_min_s", "t_roll_max_s"), ("t_train_min_s", "t_train_max_s")):
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
