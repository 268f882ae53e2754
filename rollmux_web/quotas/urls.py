from django.urls import path

from rollmux_web.quotas import views

app_name = "quotas"
urlpatterns = [
    path("", views.index, name="index"),
    path("slo-classes/new/", views.slo_class_new, name="slo-class-new"),
    path("slo-classes/<int:pk>/edit/", views.slo_class_edit, name="slo-class-edit"),
    path("new/", views.quota_new, name="quota-new"),
    path("<int:pk>/edit/", views.quota_edit, name="quota-edit"),
    path("<int:pk>/delete/", views.quota_delete, name="quota-delete"),
]
