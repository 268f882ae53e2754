from django.urls import URLPattern, URLResolver

app_name = "audit_api"
urlpatterns: list[URLPattern | URLResolver] = []
