from django.urls import path

from rollmux_web.audit import views

app_name = "audit"
urlpatterns = [
    path("", views.audit_page, name="index"),
    path("export.csv", views.audit_export, name="export"),
]
