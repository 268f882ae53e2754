from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "rollmux_web.accounts"
    label = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rollmux_web.accounts import schema  # noqa: F401  (registers the OpenAPI auth scheme)
