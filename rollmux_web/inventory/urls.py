from django.urls import path

from rollmux_web.inventory import views

app_name = "inventory"
urlpatterns = [
    path("", views.index, name="index"),
    path("gpu-types/new/", views.gpu_type_new, name="gpu-type-new"),
    path("gpu-types/<int:pk>/edit/", views.gpu_type_edit, name="gpu-type-edit"),
    path("clusters/new/", views.cluster_new, name="cluster-new"),
    path("clusters/<int:pk>/edit/", views.cluster_edit, name="cluster-edit"),
    path("nodes/new/", views.node_new, name="node-new"),
    path("nodes/<int:pk>/edit/", views.node_edit, name="node-edit"),
    path("nodes/<int:pk>/state/", views.node_state, name="node-state"),
    path("runners/new/", views.runner_package_new, name="runner-package-new"),
    path("runners/<int:pk>/delete/", views.runner_package_delete, name="runner-package-delete"),
]
