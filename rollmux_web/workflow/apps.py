from typing import Any

from django.apps import AppConfig
from django.core import checks


class WorkflowConfig(AppConfig):
    name = "rollmux_web.workflow"
    label = "workflow"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(check_archive_uri)


def check_archive_uri(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """ROLLMUX_ARCHIVE_URI must be writable while archiving is on (issue 25): a probe file
    is written and deleted. `manage.py check`, `migrate` and `runserver` stop on it (and so
    do `bin/run.sh` and the compose services, which run one of them first)."""
    from django.conf import settings

    from rollmux_web.workflow import archive_store

    if not settings.ROLLMUX_PHASE_RETENTION_DAYS:
        return []
    uri = settings.ROLLMUX_ARCHIVE_URI
    try:
        archive_store.probe(uri)
    except Exception as exc:  # any storage error: name it and the variable
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [
            checks.Error(
                f"ROLLMUX_ARCHIVE_URI={uri!r} cannot be written: {detail}",
                hint="Point ROLLMUX_ARCHIVE_URI at a writable directory or object store "
                "(pyarrow.fs URI), or set ROLLMUX_PHASE_RETENTION_DAYS=0 to turn archiving off.",
                id="rollmux.E101",
            )
        ]
    return []
