"""The Celery app. Tasks live in `workers.tasks`; they take ids and are idempotent.

Nothing here imports `workers` (the web app sits below it): the task modules are found by
name, and the worker's start-up handlers (warm-up, metrics exporter) are connected by the
composition root (`workers.composition.install`, run when Django starts, before the
worker's first signal).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rollmux_web.settings")

app = Celery("rollmux")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
app.autodiscover_tasks()  # rollmux_web.<app>.tasks
