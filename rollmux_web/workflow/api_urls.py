from django.urls import URLPattern, URLResolver

app_name = "workflow_api"
urlpatterns: list[URLPattern | URLResolver] = []
