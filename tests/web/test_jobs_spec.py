"""jobs/spec.py is the one home of the job-spec fields: the API serializer, the submit form,
the audit view and the job record derive from it (and a client can import it without Django)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

from rollmux_web import formatting
from rollmux_web.audit.models import AuditEntry
from rollmux_web.jobs import spec
from rollmux_web.jobs.serializers import JobSerializer, JobSpecSerializer
from rollmux_web.jobs.services import job_submit
from rollmux_web.jobs.views import FORM_FIELDS
from tests.factories import job_spec


def _imports(path: str) -> set[str]:
    tree = ast.parse(Path(path).read_text())
    return {
        node.module or "" if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


def test_spec_imports_only_the_standard_library() -> None:
    # spec.py imports the runner names and rule, the neutral contract's (stdlib only too:
    # tests/contract/test_phases.py), and the one wording of an unknown field, the
    # formatter's, which imports only the standard library itself (the CLI reads both)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert {m for m in _imports(spec.__file__) if m.split(".")[0] not in stdlib} == {
        "rollmux_contract.runners",
        "rollmux_web.formatting",
    }
    assert {m for m in _imports(formatting.__file__) if m.split(".")[0] not in stdlib} == set()


def test_the_serializer_takes_names_bounds_and_help_from_the_spec() -> None:
    fields = JobSpecSerializer().fields
    assert tuple(fields) == spec.SPEC_FIELDS
    for f in spec.SPEC:
        drf = fields[f.name]
        assert drf.required == f.required and drf.help_text == f.help, f.name
        assert getattr(drf, "max_value", None) == f.max_value, f.name
        assert getattr(drf, "max_length", None) == f.max_length, f.name


def test_the_form_and_the_job_record_list_the_spec_fields_in_its_order() -> None:
    assert tuple(f.name for f in FORM_FIELDS) == spec.SPEC_FIELDS
    assert [f.label for f in FORM_FIELDS] == [f.label for f in spec.SPEC]
    record = JobSerializer.Meta.fields
    assert [n for n in record if n in spec.SPEC_FIELDS] == [
        n for n in spec.SPEC_FIELDS if n in record
    ]
    assert set(spec.SPEC_FIELDS) <= set(record)


@pytest.mark.django_db
def test_the_example_spec_is_a_valid_submission(world: Any) -> None:
    ser = JobSpecSerializer(data=spec.EXAMPLE_SPEC, context={"user": world.alice})
    assert ser.is_valid(), ser.errors


@pytest.mark.django_db
def test_the_audit_entry_of_a_submission_holds_every_spec_field(world: Any) -> None:
    job = job_submit(user=world.alice, spec=job_spec(time_scale=4.0), channel="api")
    after = AuditEntry.objects.get(action="job.submit", object_id=str(job.pk)).after
    assert set(after) == {*spec.SPEC_FIELDS, "status", "channel"}
    assert after["tenant"] == "vision" and after["slo_class"] == "silver"
    assert after["time_scale"] == 4.0 and after["t_roll_min_s"] == 90.0
