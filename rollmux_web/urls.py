"""Root URLs. Each app owns its `urls.py` (pages) and `api_urls.py` (REST, under /api/v1/)."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic.base import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from rollmux_web import metrics_db
from rollmux_web.workflow import fairshare_views

urlpatterns = [
    # first: Django tries the patterns in order, and every include that does not match an
    # API path costs a walk of its patterns (nothing before it begins with "api/")
    path("api/v1/", include("rollmux_web.api.urls")),
    path("", include("rollmux_web.reports.urls")),
    path("accounts/", include("rollmux_web.accounts.urls")),
    path("jobs/", include("rollmux_web.jobs.urls")),
    path("groups/", include("rollmux_web.reports.group_urls")),
    path("inventory/", include("rollmux_web.inventory.urls")),
    path("quotas/", include("rollmux_web.quotas.urls")),
    path("queue/", fairshare_views.queue_page, name="queue"),
    path("fair-share/", fairshare_views.share_table, name="fair-share"),
    path("queue/jobs/<int:job_id>/", fairshare_views.queue_position, name="queue-position"),
    path("audit/", include("rollmux_web.audit.urls")),
    path("notifications/", include("rollmux_web.notifications.urls")),
    path("sso/", include("rollmux_web.sso.urls")),
    # The schema and its docs page are public, as most platforms keep them: they describe
    # the API (paths, fields, bounds), never data, and every operation needs a token. The
    # docs page runs under the site's policy (no inline script or style: the split view
    # serves its start-up script as a file, templates/api/swagger_ui.html its style).
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api/swagger_ui.html"),
        name="swagger-ui",
    ),
    path("metrics", metrics_db.metrics_view, name="metrics"),
    path("django-admin/", admin.site.urls),
    path("favicon.ico", RedirectView.as_view(url="/static/favicon.svg")),
]
