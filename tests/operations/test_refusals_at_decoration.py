"""Refused as the cap is made, not at the first call or request: a cap of a concurrency
rule that would wait, and Django's checks not crashed by a middleware that fails as it is
imported. A review's findings, written failing first."""

from __future__ import annotations

from pathlib import Path

import pytest

from freqguard import ConfigError, Guard, MemoryBackend, Rule, capped

# -- 1. E008's middleware detection crashes the checks on a module raising at import -------


def test_a_middleware_module_raising_at_import_does_not_crash_the_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cost_checks`` (``freqguard.E008``) now imports every ``MIDDLEWARE`` entry
    (``_ours``: ``import_string``) to read its MRO, and catches only ``ImportError``. A
    project middleware whose module raises anything else as it is imported (Django's
    ``ImproperlyConfigured`` for a setting the environment lacks, a ``RuntimeError``, a
    ``SyntaxError`` in a file being edited) makes freqguard's check raise out of
    ``checks.run_checks()``: ``manage.py check``, and every command that runs the checks
    (``migrate``, ``runserver``), stops with freqguard's traceback, though freqguard's
    check has nothing to say about that middleware. Django's own checks never import
    ``MIDDLEWARE``; ``_ours``' docstring says one that does not import is "Django's own
    check's". Before this round the entries were compared as strings: the checks ran.
    Expected: the checks run (the entry is not freqguard's middleware). Got: the module's
    ``ImproperlyConfigured`` out of ``run_checks``."""
    pytest.importorskip("django")
    from tests.integrations import django_site

    django_site.setup()
    from django.core import checks
    from django.test import override_settings

    (tmp_path / "review_e_strict_middleware.py").write_text(
        "from django.core.exceptions import ImproperlyConfigured\n"
        "raise ImproperlyConfigured('STRICT_AUDIT_URL is not set')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    middleware = [
        "review_e_strict_middleware.AuditMiddleware",
        *django_site.SETTINGS["MIDDLEWARE"],
    ]
    with override_settings(MIDDLEWARE=middleware):
        found = checks.run_checks()  # got: ImproperlyConfigured raised here
    assert not [m for m in found if m.id == "freqguard.E008"]


# -- 2. a cap of a concurrency Rule waiting is refused at its first call only ---------------


def test_a_cap_of_a_concurrency_rule_waiting_is_refused_at_decoration() -> None:
    """This round refuses ``@capped("pool", guard=g, on_exceeded="wait")`` over a lease
    policy as it is decorated (``Capped.__call__``: ``leased(...)`` when ``_policy`` is in
    the guard's policies). A cap made from a concurrency ``Rule`` itself
    (``@capped(Rule("2 concurrent", lease=30), guard=g, on_exceeded="wait")``) knows it
    counts leases just as well at decoration (its rules are right there, and its policy is
    registered then when the key's dimensions are known), but is decorated, and refused at
    its first call: "policy 'capped....' counts leases: on_exceeded='wait' ...". Expected:
    the same ConfigError at decoration. Got: decorated."""
    guard = Guard(MemoryBackend())
    with pytest.raises(ConfigError, match="count leases"):  # got: no error

        @capped(Rule("2 concurrent", lease=30), guard=guard, on_exceeded="wait", key=dict)
        def send() -> int:
            return 1
