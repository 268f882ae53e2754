from django.urls import path

from rollmux_web.sso import views

# mozilla-django-oidc reverses these two names (no namespace) for its redirect URI
urlpatterns = [
    path("login/", views.login_start, name="oidc_authentication_init"),
    path("callback/", views.login_callback, name="oidc_authentication_callback"),
    path("failed/", views.login_failed, name="sso-failed"),
]
