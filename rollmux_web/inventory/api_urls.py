from django.urls import URLPattern, URLResolver

app_name = "inventory_api"
urlpatterns: list[URLPattern | URLResolver] = []
