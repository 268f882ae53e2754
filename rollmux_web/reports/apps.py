from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "rollmux_web.reports"
    label = "reports"
    default_auto_field = "django.db.models.BigAutoField"
