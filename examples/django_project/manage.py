"""``python -m examples.django_project.manage check`` (or runserver) from the repository's
root."""

from __future__ import annotations

import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_project.settings")
    execute_from_command_line(sys.argv)
