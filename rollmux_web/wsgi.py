"""The WSGI application (gunicorn in production: docker-compose, bench/api_submit.py).

Once Django and the URLconf (every view, serializer and model module) are loaded, the heap
is frozen (`gc.freeze()`): start-up objects live as long as the process, and a full garbage
collection, which Python starts by itself every few hundred requests, would scan all of
them (~180k objects) while every thread of the worker waits: 124 ms measured in-process on
this loaded 2-core box, hundreds of ms of wall time under load, inside whichever requests
were running (bench/api_submit.py's p99). Frozen, a full collection scans what was
allocated since (a few ms). The controller does the same (workers.warmup.freeze_heap).
"""

import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rollmux_web.settings")
application = get_wsgi_application()
get_resolver().url_patterns  # noqa: B018  (imports the URLconf: the views and their modules)
gc.collect()
gc.freeze()
