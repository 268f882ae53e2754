from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "rollmux_web.accounts"
    label = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from axes.signals import user_locked_out

        from rollmux_web.accounts import schema  # noqa: F401  (registers the OpenAPI auth scheme)
        from rollmux_web.accounts.throttling import record_lockout

        user_locked_out.connect(record_lockout, dispatch_uid="rollmux-audit-lockout")
