"""/api/v1/: every app contributes its routes through its `api_urls.py`."""

from django.urls import include, path

from rollmux_web.api import cli_views

urlpatterns = [
    # before the jobs app's `jobs/<id>/`: what the CLI's dry run and describe read
    path("jobs/dry-run/", cli_views.JobDryRunView.as_view(), name="jobs-dry-run"),
    path("jobs/<str:job_id>/describe/", cli_views.JobDescribeView.as_view(), name="jobs-describe"),
    # the jobs routes next: submissions are the busiest path (none of the others starts "jobs/")
    path("", include("rollmux_web.jobs.api_urls")),
    path("", include("rollmux_web.accounts.api_urls")),
    path("", include("rollmux_web.inventory.api_urls")),
    path("", include("rollmux_web.quotas.api_urls")),
    path("", include("rollmux_web.workflow.api_urls")),
    path("", include("rollmux_web.audit.api_urls")),
    path("", include("rollmux_web.reports.api_urls")),
]
