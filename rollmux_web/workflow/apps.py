from django.apps import AppConfig


class WorkflowConfig(AppConfig):
    name = "rollmux_web.workflow"
    label = "workflow"
    default_auto_field = "django.db.models.BigAutoField"
