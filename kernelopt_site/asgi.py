"""ASGI entry point.

Django's ASGI handler reads a request's whole body before any middleware runs, so the body
limit wraps it here (kernelopt_site.middleware.ASGIBodyLimit).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernelopt_site.settings")
django_application = get_asgi_application()

from kernelopt_site.middleware import ASGIBodyLimit  # noqa: E402  (needs the settings above)

application = ASGIBodyLimit(django_application)
