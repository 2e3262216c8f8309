"""WSGI entry point (gunicorn kernelopt_site.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernelopt_site.settings")
application = get_wsgi_application()
