from django.urls import URLPattern, URLResolver

app_name = "workflow"
urlpatterns: list[URLPattern | URLResolver] = []
