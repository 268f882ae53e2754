from django.urls import path

from rollmux_web.reports import views

app_name = "reports"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("reports/cost/", views.cost_report, name="cost"),
    path("reports/cost.csv", views.cost_csv, name="cost-csv"),
    path("reports/cost.parquet", views.cost_parquet, name="cost-parquet"),
    path("reports/slo/", views.slo_report, name="slo"),
    path("whatif/", views.whatif_page, name="whatif"),
    path("whatif/preview/", views.whatif_preview, name="whatif-preview"),
    path("whatif/<int:run_id>/", views.whatif_detail, name="whatif-run"),
    path("timeline/jobs/<int:job_id>/", views.job_timeline, name="job-timeline"),
    path("timeline/jobs/<int:job_id>/trace.json", views.job_trace, name="job-trace"),
    path("timeline/jobs/<int:job_id>/outcome/", views.job_outcome, name="job-outcome"),
    path(
        "timeline/jobs/<int:job_id>/archive/<int:index>/",
        views.job_archive_file,
        name="job-archive-file",
    ),
]
