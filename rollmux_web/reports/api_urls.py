from django.urls import URLPattern, URLResolver

app_name = "reports_api"
urlpatterns: list[URLPattern | URLResolver] = []
