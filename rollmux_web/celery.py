"""The Celery app. Tasks live in `workers.tasks`; they take ids and are idempotent."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rollmux_web.settings")

app = Celery("rollmux")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
app.autodiscover_tasks()  # rollmux_web.<app>.tasks

import workers.metrics_exporter  # noqa: E402,F401  (serves a worker's own /metrics)
import workers.warmup  # noqa: E402,F401  (connects the dispatcher when a worker starts)
