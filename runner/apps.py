from django.apps import AppConfig


class RunnerConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "runner"
    verbose_name = "Execution"

    def ready(self) -> None:
        # The run middleware (bookkeeping, stale sweep) on whichever broker settings configured.
        # Nothing is started here: the embedded worker is started by `manage.py serve` only.
        import dramatiq

        from runner.middleware import install

        install(dramatiq.get_broker())
