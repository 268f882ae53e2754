"""Schema-driven fuzzing of the whole API (schemathesis 4) against a live server.

Every operation in /api/schema/ gets generated valid and invalid requests with an admin
token; the run fails on a 5xx, an undocumented status code, a wrong content type or a
response body that does not match the schema. Failures from every operation are
collected and reported together, with the operation's label.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Examples per operation and generation mode (the job operations get more; the other ~35
# operations share the CI time budget). Raise locally with ROLLMUX_FUZZ_EXAMPLES.
EXAMPLES = int(os.environ.get("ROLLMUX_FUZZ_EXAMPLES", "5"))
JOB_EXAMPLES = max(EXAMPLES, 10)
# What a broken response is: a 5xx, a body that is not what the schema says, the wrong type.
HARD_CHECKS = [not_a_server_error, content_type_conformance, response_schema_conformance]
# Where the schema and the validation disagree: an undocumented status code, or a request
# the schema calls invalid (a wrong type, a value outside an enum or a minimum, a parameter
# given twice) that the API accepts. (The converse, positive_data_acceptance, is not run:
# a schema cannot know which SLO class, tenant or pool names exist, nor that `end` must not
# precede `start`, so a 400 for those is the contract.)
CONFORMANCE_CHECKS = [status_code_conformance, negative_data_rejection]
ALL_CHECKS = [*HARD_CHECKS, *CONFORMANCE_CHECKS]
# The jobs engineer's operations; everything else in the schema is "other".
JOB_PATHS = {"/api/v1/jobs/", "/api/v1/jobs/{job_id}/", "/api/v1/jobs/{job_id}/cancel/"}


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _fuzz_operation(
    operation: Any, base_url: str, headers: dict[str, str], checks: list[Any], examples: int
) -> None:
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=True,  # the same cases every run: a failure reproduces
            # no shrinking: the first failing case is reported as found (shrinking a
            # failure costs dozens of extra requests per operation)
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case: Any) -> None:
            case.call_and_validate(base_url=base_url, headers=headers, checks=checks)

        run()


def _fuzz(
    world: Any, live_server: Any, *, jobs: bool, checks: list[Any]
) -> tuple[list[str], list[str]]:
    """Fuzz the job operations (jobs=True) or every other operation; return labels, failures."""
    headers = {"Authorization": f"Bearer {world.tokens['admin']}"}
    schema = schemathesis.openapi.from_url(
        f"{live_server.url}/api/schema/?format=json", headers=headers
    )
    failures: list[str] = []
    labels: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.path in JOB_PATHS) != jobs:
            continue
        labels.append(operation.label)
        try:
            _fuzz_operation(
                operation, live_server.url, headers, checks, JOB_EXAMPLES if jobs else EXAMPLES
            )
        # collect every operation's failures (schemathesis raises an exception group)
        except (Exception, BaseExceptionGroup) as exc:
            lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
            failures.append(f"{operation.label}: {' | '.join(lines[:8])}")
    return labels, failures


def test_job_operations_match_their_schema(world: Any, live_server: Any) -> None:
    labels, failures = _fuzz(world, live_server, jobs=True, checks=ALL_CHECKS)
    assert set(labels) >= {
        "GET /api/v1/jobs/",
        "POST /api/v1/jobs/",
        "GET /api/v1/jobs/{job_id}/",
        "POST /api/v1/jobs/{job_id}/cancel/",
    }
    assert not failures, "\n\n".join(failures)


def test_no_other_operation_returns_5xx_or_breaks_its_response_schema(
    world: Any, live_server: Any
) -> None:
    labels, failures = _fuzz(world, live_server, jobs=False, checks=HARD_CHECKS)
    assert len(labels) > 5, labels
    assert not failures, "\n\n".join(failures)


def test_every_other_operation_documents_its_status_codes_and_validates_its_schema(
    world: Any, live_server: Any
) -> None:
    # Kept apart from the test above so an undocumented 400/404 (a schema defect) does not
    # hide a 5xx or a malformed body: hypothesis stops at the first failure it finds.
    labels, failures = _fuzz(world, live_server, jobs=False, checks=CONFORMANCE_CHECKS)
    assert len(labels) > 5, labels
    assert not failures, "\n\n".join(failures)
