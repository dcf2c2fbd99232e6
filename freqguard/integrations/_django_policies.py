"""The policies the Django integration registers on a guard, each with the source of its
rules (a view's route and the default limits, a cap, a DRF throttle's ``rate``,
``DEFAULT_THROTTLE_RATES[scope]``).

Settings change (``override_settings`` in a test) and a throttle's ``rate`` can change at
run time, while the guard given in ``FREQGUARD_BACKEND`` keeps the policies registered
before: a policy from the same source replaces its older version
(``add_policy(..., replace=True)``), so the change takes effect. Rules under one name from
two sources at once (two throttles giving one scope two rates, two caps naming one budget
with different rates) are an error naming both, never a silent turn-about; so is a name the
integration did not register (a policy of the configuration file).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from freqguard.errors import ConfigError
from freqguard.policy import Policy

__all__ = ["register"]

#: by guard: each policy name the integration registered, and who gave its rules
_sources: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def register(guard: Any, policy: Policy, source: str) -> None:
    """Register ``policy`` on ``guard``, its rules given by ``source``.

    Raises:
        ConfigError: a policy of that name with other rules, registered from another
            source, or not by the integration.
    """
    with _lock:
        known = _sources.setdefault(guard, {})
        before = known.get(policy.name)
        try:
            guard.add_policy(policy, replace=before == source)
        except ConfigError as error:
            if before is None:
                raise
            raise ConfigError(
                f"policy {policy.name!r} is given other rules by {before} and by {source}: "
                "give one budget one rate"
            ) from error
        known[policy.name] = source
