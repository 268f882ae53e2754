from django.urls import path

from rollmux_web.workflow import api, fairshare_api

app_name = "workflow_api"
# <str:...> so that a malformed id still reaches the API and gets a JSON 404
urlpatterns = [
    path("jobs/<str:job_id>/phases/", api.JobPhasesView.as_view(), name="job-phases"),
    path("jobs/<str:job_id>/metrics/", api.JobMetricsView.as_view(), name="job-metrics"),
    path("groups/", api.GroupListView.as_view(), name="groups"),
    path("groups/<str:group_id>/", api.GroupDetailView.as_view(), name="group"),
    path("queue/", fairshare_api.QueueView.as_view(), name="queue"),
    path("fair-share/", fairshare_api.FairShareView.as_view(), name="fair-share"),
]
