"""The cost page's per-job and per-line rows rendered in Python (report_tags.cost_job_rows,
cost_line_rows) are the HTML of the template loops they replaced, byte for byte: a
profiling run, lines in several groups, in none, negative savings, names to escape."""

from __future__ import annotations

import copy
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from django.template import Context, Template

from rollmux_web.reports.selectors import cost as cost_module
from tests.reports.test_cost_days import _keep_to, _more_groups
from tests.reports.test_retention import NOW, build_world

# the loops as cost.html had them (before the tags)
JOB_LOOP = """{% load report_tags %}
        {% for j in jobs_page %}
          <tr data-job="{{ j.job_id }}">
            <td>{{ j.tenant }}</td><td><a href="{% url 'jobs:detail' j.job_id %}">{{ j.job_name }}</a> <span class="muted job-id">#{{ j.job_id }}</span></td>
            {% if j.profiled %}<td class="num">{{ j.profile.gpu_hours|hours:4 }}</td><td class="num profile-cost">{{ j.profile.cost|money }}</td>{% else %}<td class="num muted" title="no profiling run in this range">—</td><td class="num muted" title="no profiling run in this range">—</td>{% endif %}
            <td class="num">{{ j.run.gpu_hours|hours:4 }}</td><td class="num run-cost">{{ j.run.cost|money }}</td>
            <td class="num">{{ j.gpu_hours|hours:4 }}</td><td class="num job-total">{{ j.cost|money }}</td>
          </tr>
        {% endfor %}
"""  # noqa: E501
LINE_LOOP = """{% load report_tags %}
        {% for ln in page_lines %}
          <tr data-job="{{ ln.job_id }}" data-stage="{{ ln.stage }}">
            <td>{{ ln.tenant }}</td><td><a href="{% url 'reports:job-timeline' ln.job_id %}">{{ ln.job_name }}</a> <span class="muted job-id">#{{ ln.job_id }}</span></td><td class="stage">{% if ln.is_profile %}<span class="badge profiling">{{ ln.stage_label }}</span>{% else %}{{ ln.stage_label }}{% endif %}</td><td>{{ ln.gpu_type }}</td>
            <td class="groups">{% if ln.group_ids|length == 1 %}<a href="{% url 'groups:timeline' ln.group_ids.0 %}">group {{ ln.group_ids.0 }}</a>{% elif ln.group_ids %}groups {% for g in ln.group_ids %}<a href="{% url 'groups:timeline' g %}" aria-label="group {{ g }}">{{ g }}</a>{% if not forloop.last %}, {% endif %}{% endfor %}{% else %}—{% endif %}</td>
            <td class="num">{{ ln.gpu_hours|hours }}</td><td class="num">{{ ln.busy_cost|money }}</td><td class="num">{{ ln.idle_cost|money }}</td>
            <td class="num">{{ ln.cost|money }}</td><td class="num">{{ ln.solo_disagg_cost|money }}</td><td class="num">{{ ln.colocated_cost|money }}</td><td class="num{% if ln.saving_vs_solo < 0 %} loss" title="negative: this line cost more than the same phases on dedicated pools (its share of its group's idle time){% endif %}">{{ ln.saving_vs_solo|money }}</td>
          </tr>
        {% endfor %}
"""  # noqa: E501
JOB_TAG = "{% load report_tags %}\n        {% cost_job_rows jobs_page %}\n"
LINE_TAG = "{% load report_tags %}\n        {% cost_line_rows page_lines %}\n"


def _render(source: str, **ctx: Any) -> str:
    return Template(source).render(Context(ctx))


@pytest.mark.django_db
def test_the_rows_rendered_in_python_are_the_template_loops_html(world: Any) -> None:
    build_world(world)
    _more_groups(world)
    _keep_to(date(2026, 1, 20))
    report = cost_module.cost_report(
        user=world.user("finance"), start=date(2026, 1, 1), end=date(2026, 1, 31), now=NOW
    )
    jobs, lines = list(report.by_job), list(report.lines)
    assert any(j.profiled for j in jobs) and any(not j.profiled for j in jobs)
    # names to escape, a line in no group, one with a loss, thousands in its figures
    odd = copy.deepcopy(lines[0])
    odd.job_name, odd.tenant, odd.group_ids = "<b>a & 'b' \"c\"</b>", "t<&>", []
    odd.busy_cost, odd.solo_disagg_cost = Decimal("12345.67"), Decimal("-1.00")
    lines.append(odd)
    many = copy.deepcopy(lines[-2])
    many.group_ids = [3, 30, 1234]
    lines.append(many)
    assert any(len(ln.group_ids) == 1 for ln in lines)
    assert any(ln.saving_vs_solo < 0 for ln in lines) and any(ln.is_profile for ln in lines)
    job = copy.deepcopy(jobs[0])
    job.job_name, job.tenant = "<i>x's & y</i>", '"q"'
    jobs.append(job)
    assert _render(JOB_TAG, jobs_page=jobs) == _render(JOB_LOOP, jobs_page=jobs)
    assert _render(LINE_TAG, page_lines=lines) == _render(LINE_LOOP, page_lines=lines)
    assert _render(JOB_TAG, jobs_page=[]) == _render(JOB_LOOP, jobs_page=[])
    assert _render(LINE_TAG, page_lines=[]) == _render(LINE_LOOP, page_lines=[])
