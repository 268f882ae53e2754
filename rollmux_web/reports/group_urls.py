from django.urls import URLPattern, URLResolver

app_name = "groups"
urlpatterns: list[URLPattern | URLResolver] = []
