from django.apps import AppConfig


class WorkersConfig(AppConfig):
    """The workflow's runtime layer (Celery tasks, dispatchers). It has no models; being a
    Django app gives it `ready()`, where the composition root wires the process."""

    name = "workers"
    label = "workers"

    def ready(self) -> None:
        from workers import composition

        composition.install()
