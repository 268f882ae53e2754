from django.urls import path

from rollmux_web.jobs import api

app_name = "jobs_api"
urlpatterns = [
    path("jobs/", api.JobListCreateView.as_view(), name="list"),
    path("jobs/<int:job_id>/", api.JobDetailView.as_view(), name="detail"),
    path("jobs/<int:job_id>/cancel/", api.JobCancelView.as_view(), name="cancel"),
]
