from django.urls import path

from rollmux_web.jobs import views

app_name = "jobs"
urlpatterns = [
    path("", views.job_list_page, name="list"),
    path("new/", views.job_new, name="new"),
    path("new/validate/", views.job_validate, name="validate"),
    path("new/preview/", views.job_preview, name="preview"),
    path("upload/", views.job_upload, name="upload"),
    path("<int:job_id>/", views.job_detail, name="detail"),
    path("<int:job_id>/cancel/", views.job_cancel_page, name="cancel"),
]
