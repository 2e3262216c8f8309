"""`manage.py serve [addrport]`: runserver, plus the embedded worker when embedded mode is on.

This is what `make run` calls. With KERNELOPT_EMBEDDED_WORKER (the default when BROKER_URL is
unset: stub broker) a dramatiq worker runs on threads of the server process (runner.embedded),
started in the process that serves requests (the autoreloader's child, not its watcher), so
uploads are diagnosed without RabbitMQ or `rundramatiq`. User code still runs only in sandboxed
child processes. Without embedded mode it is plain runserver, and workers run separately.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.management import get_commands, load_command_class
from django.db import DatabaseError

logger = logging.getLogger(__name__)

# Whichever runserver is installed (whitenoise's, staticfiles', Django's): serve extends it.
_Runserver = type(load_command_class(get_commands()["runserver"], "runserver"))


class Command(_Runserver):
    help = "Run the development web server; in embedded mode also the in-process worker."

    def inner_run(self, *args, **options):
        if settings.KERNELOPT_EMBEDDED_WORKER:
            from runner import embedded

            try:
                embedded.start()
            except DatabaseError as exc:  # e.g. not migrated yet: serve pages, say why nothing runs
                self.stderr.write(f"embedded worker not started: {exc}")
            else:
                self.stdout.write("Embedded worker started (stub broker; jobs run in sandboxed children).")
        return super().inner_run(*args, **options)
