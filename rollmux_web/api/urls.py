"""/api/v1/: every app contributes its routes through its `api_urls.py`."""

from django.urls import include, path

urlpatterns = [
    path("", include("rollmux_web.accounts.api_urls")),
    path("", include("rollmux_web.inventory.api_urls")),
    path("", include("rollmux_web.quotas.api_urls")),
    path("", include("rollmux_web.jobs.api_urls")),
    path("", include("rollmux_web.workflow.api_urls")),
    path("", include("rollmux_web.audit.api_urls")),
    path("", include("rollmux_web.reports.api_urls")),
]
