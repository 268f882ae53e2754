from django.urls import URLPattern, URLResolver

app_name = "quotas"
urlpatterns: list[URLPattern | URLResolver] = []
