from rest_framework.routers import SimpleRouter

from rollmux_web.quotas import api

app_name = "quotas_api"
router = SimpleRouter()
router.register("slo-classes", api.SloClassViewSet, basename="slo-class")
router.register("quotas", api.QuotaViewSet, basename="quota")
urlpatterns = router.urls
