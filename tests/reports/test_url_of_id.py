"""`url_of_id` (the SLO page's row links) is `{% url name pk %}`: the same URL for every id,
under a script prefix too (a deployment under a sub-path), and escaped as the tag's."""

from __future__ import annotations

import pytest
from django.template import Context, Template
from django.urls import reverse, set_script_prefix

from rollmux_web.reports.templatetags.report_tags import url_of_id


@pytest.mark.parametrize("name", ["reports:job-timeline", "groups:timeline"])
@pytest.mark.parametrize("pk", [1, 7, 42, 918273645, 10**12])
def test_url_of_id_is_the_reversed_url(name: str, pk: int) -> None:
    assert url_of_id(pk, name) == reverse(name, args=[pk])


def test_url_of_id_follows_the_script_prefix() -> None:
    try:
        set_script_prefix("/rollmux/")
        assert url_of_id(5, "reports:job-timeline") == reverse("reports:job-timeline", args=[5])
        assert url_of_id(5, "reports:job-timeline").startswith("/rollmux/")
    finally:
        set_script_prefix("/")
    assert not url_of_id(5, "reports:job-timeline").startswith("/rollmux/")


def test_the_filter_renders_what_the_url_tag_renders() -> None:
    context = Context({"ids": [3, 30, 300]})
    tag = Template(
        "{% for i in ids %}{% url 'groups:timeline' i %} {% url 'reports:job-timeline' i %}|"
        "{% endfor %}"
    ).render(context)
    ours = Template(
        "{% load report_tags %}{% for i in ids %}{{ i|url_of_id:'groups:timeline' }} "
        "{{ i|url_of_id:'reports:job-timeline' }}|{% endfor %}"
    ).render(context)
    assert ours == tag
