from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "rollmux_web.inventory"
    label = "inventory"
    default_auto_field = "django.db.models.BigAutoField"
