from django.urls import URLPattern, URLResolver

app_name = "jobs_api"
urlpatterns: list[URLPattern | URLResolver] = []
