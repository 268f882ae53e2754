from django.urls import URLPattern, URLResolver

app_name = "jobs"
urlpatterns: list[URLPattern | URLResolver] = []
