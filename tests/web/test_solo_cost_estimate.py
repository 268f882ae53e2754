"""A job's solo cost per iteration is an estimate shown below a cent too (QA pass 12: a real
hf-grpo job of sub-second phases read "Solo cost / iteration $0.00 busy + $0.00 bubble")."""

from __future__ import annotations

from typing import Any

import pytest

from rollmux_web.jobs.services import job_submit
from rollmux_web.reports.templatetags.report_tags import estimate
from tests.factories import job_spec


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.0017, "$0.0017"),
        (0.000123456, "$0.00012"),
        (0.01, "$0.01"),
        (2.645, "$2.65"),
        (1234.5, "$1,234.50"),
        (0, "$0.00"),
        (None, "—"),
    ],
)
def test_an_estimate_shows_cents_from_a_cent_up_and_two_digits_below(
    value: Any, shown: str
) -> None:
    assert estimate(value) == shown


@pytest.mark.django_db
def test_a_job_of_sub_second_phases_shows_what_an_iteration_costs(
    client_as: Any, world: Any
) -> None:
    spec = job_spec(
        name="tiny", t_roll_min_s=0.04, t_roll_max_s=0.05, t_train_min_s=0.08, t_train_max_s=0.1
    )
    job = job_submit(user=world.alice, spec=spec, channel="t")
    page = client_as("alice").get(f"/jobs/{job.pk}/").content.decode()
    row = page[page.index("Solo cost / iteration") :][:300]
    # 8 H20 GPUs x 0.05 s at $1.85/h + 8 H800 GPUs x 0.1 s at $5.28/h = $0.0014 busy
    assert "$0.0014 busy" in row and "$0.00 busy" not in row
