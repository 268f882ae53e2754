import sys

from django.apps import AppConfig

SERVER_COMMANDS = ("runserver", "gunicorn", "uvicorn", "daphne")


class WorkflowConfig(AppConfig):
    name = "rollmux_web.workflow"
    label = "workflow"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Embedded default (no Redis, no beat process): the web server runs the safety-net
        # beat itself, so jobs left queued or running by a previous run get picked up.
        if any(cmd in arg for arg in sys.argv[:2] for cmd in SERVER_COMMANDS):
            from workers import embedded

            embedded.set_serving()
            embedded.ensure_started()
