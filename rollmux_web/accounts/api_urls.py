from django.urls import path

from rollmux_web.accounts import api

app_name = "accounts_api"
urlpatterns = [
    path("auth/token/", api.TokenObtainView.as_view(), name="token"),
    path("me/", api.MeView.as_view(), name="me"),
    path("tenants/", api.TenantListView.as_view(), name="tenants"),
    path("tenants/<str:name>/", api.TenantDetailView.as_view(), name="tenant"),
]
