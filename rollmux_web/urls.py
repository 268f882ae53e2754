"""Root URLs. Each app owns its `urls.py` (pages) and `api_urls.py` (REST, under /api/v1/)."""

from csp.constants import UNSAFE_INLINE
from csp.decorators import csp_update
from django.contrib import admin
from django.urls import include, path
from django.views.generic.base import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from rollmux_web import metrics_db

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
    path("audit/", include("rollmux_web.audit.urls")),
    path("notifications/", include("rollmux_web.notifications.urls")),
    path("sso/", include("rollmux_web.sso.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI (vendored): its start-up script is a separate file (the split view), but it
    # inserts its own style elements, so inline styles are allowed on this page only
    path(
        "api/docs/",
        csp_update({"style-src": [UNSAFE_INLINE]})(
            SpectacularSwaggerSplitView.as_view(url_name="schema")
        ),
        name="swagger-ui",
    ),
    path("metrics", metrics_db.metrics_view, name="metrics"),
    path("django-admin/", admin.site.urls),
    path("favicon.ico", RedirectView.as_view(url="/static/favicon.svg")),
]
