"""The example project's settings: freqguard's middleware, its app (for ``manage.py
check``) and its settings. ``FREQGUARD_BACKEND`` comes from the environment (default
memory://; ``redis://127.0.0.1:6380`` to share the counts between workers)."""

from __future__ import annotations

import os

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "examples.django_project.urls"
INSTALLED_APPS = ["freqguard.integrations.django.FreqGuardConfig"]
MIDDLEWARE = ["freqguard.integrations.django.FreqGuardMiddleware"]
DATABASES: dict[str, object] = {}
USE_TZ = True

FREQGUARD_BACKEND = os.environ.get("FREQGUARD_BACKEND", "memory://")
FREQGUARD_DEFAULT_LIMITS = "100/minute"  # every view, each on its own budget
