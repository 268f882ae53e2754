from django.urls import URLPattern, URLResolver

app_name = "quotas_api"
urlpatterns: list[URLPattern | URLResolver] = []
