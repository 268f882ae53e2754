from django.urls import path

from rollmux_web.reports import views

app_name = "groups"
urlpatterns = [
    path("", views.group_list, name="list"),
    path("<int:group_id>/", views.group_timeline, name="timeline"),
    path("<int:group_id>/trace.json", views.group_trace, name="trace"),
]
