from django.urls import path

from rollmux_web.notifications import views

app_name = "notifications"
urlpatterns = [
    path("", views.index, name="index"),
    path("<int:subscription_id>/delete/", views.delete, name="delete"),
    path("<int:subscription_id>/rotate/", views.rotate, name="rotate"),
    path("<int:subscription_id>/test/", views.test, name="test"),
    path("confirm/<str:token>/", views.confirm, name="confirm"),
]
