from django.apps import AppConfig


class DiagnosisConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "diagnosis"
    verbose_name = "Kernel diagnosis"
