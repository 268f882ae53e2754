from django.urls import path

from rollmux_web.reports import api

app_name = "reports_api"
urlpatterns = [
    path("reports/cost/", api.CostReportApi.as_view(), name="cost"),
    path("reports/cost.parquet", api.CostParquetApi.as_view(), name="cost-parquet"),
    path("reports/slo/", api.SloReportApi.as_view(), name="slo"),
]
