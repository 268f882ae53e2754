from django.urls import path

from rollmux_web.jobs import api

app_name = "jobs_api"
# <str:...> so that a malformed id still reaches the API and gets a JSON 404
urlpatterns = [
    path("jobs/", api.JobListCreateView.as_view(), name="list"),
    path("jobs/<str:job_id>/", api.JobDetailView.as_view(), name="detail"),
    path("jobs/<str:job_id>/cancel/", api.JobCancelView.as_view(), name="cancel"),
]
