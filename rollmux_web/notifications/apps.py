from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "rollmux_web.notifications"
    label = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rollmux_web import events
        from rollmux_web.notifications.tasks import on_event

        events.subscribe(on_event)
