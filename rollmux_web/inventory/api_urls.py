from rest_framework.routers import SimpleRouter

from rollmux_web.inventory import api

app_name = "inventory_api"
router = SimpleRouter()
router.register("gpu-types", api.GpuTypeViewSet, basename="gpu-type")
router.register("clusters", api.ClusterViewSet, basename="cluster")
router.register("nodes", api.NodeViewSet, basename="node")
router.register("runner-packages", api.RunnerPackageViewSet, basename="runner-package")
urlpatterns = router.urls
