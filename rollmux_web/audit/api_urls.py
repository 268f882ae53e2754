from rest_framework.routers import SimpleRouter

from rollmux_web.audit import api

app_name = "audit_api"
router = SimpleRouter()
router.register("audit", api.AuditEntryViewSet, basename="audit-entry")
urlpatterns = router.urls
