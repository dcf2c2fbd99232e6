"""``uvicorn examples.django_project.asgi:application`` (from the repository's root)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_project.settings")
application = get_asgi_application()
