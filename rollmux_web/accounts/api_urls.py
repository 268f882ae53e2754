from django.urls import URLPattern, URLResolver

app_name = "accounts_api"
urlpatterns: list[URLPattern | URLResolver] = []
