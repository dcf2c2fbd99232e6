"""What a Redis backend does before calls go: the server's checks once (``_inspect``),
which way the policy function is called (Redis Functions or EVAL scripts, ``_library``), and
each policy's bins setting against the store's (``_claims``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from freqguard.backends._boundary import ERRORS
from freqguard.backends._claims import Claims, claim, other_setting, unclaimed
from freqguard.backends._inspect import inspection
from freqguard.backends._lanes import adrive
from freqguard.backends._library import (
    ATTEMPTS,
    FUNCTIONS,
    SCRIPT_KINDS,
    SCRIPTS,
    Library,
    missing,
)
from freqguard.backends._resp import record_key
from freqguard.backends._settle import refusal
from freqguard.backends._shared_run import AsyncSharedRun
from freqguard.errors import ConfigError, shown
from freqguard.script.calls import ScriptCall

__all__ = ["AsyncPreparation", "check_scripts"]


def check_scripts(scripts: object) -> str:
    """``scripts`` as given, if it is one of ``_library.SCRIPT_KINDS``.

    Raises:
        ConfigError: anything else, naming what is allowed.
    """
    if not isinstance(scripts, str) or scripts not in SCRIPT_KINDS:
        allowed = ", ".join(repr(kind) for kind in SCRIPT_KINDS)
        raise ConfigError(
            f"scripts must be one of {allowed} (auto: Redis Functions where the store runs "
            f"them, else EVAL scripts), got {shown(scripts)}"
        )
    return str(scripts)


class AsyncPreparation:
    """A backend's checks before its calls, and what they found."""

    __slots__ = (
        "_claiming",
        "_claims",
        "_client",
        "_cluster",
        "_inspecting",
        "_loading",
        "_wait",
        "inspected",
        "library",
        "scripts",
    )

    def __init__(
        self, client: Any, cluster: bool, bins: int, scripts: str, wait: bool = False
    ) -> None:
        self._client, self._cluster, self._wait = client, cluster, wait
        self.scripts = check_scripts(scripts)
        #: how calls reach the policy function: as Redis Functions or as EVAL scripts
        self.library: Library = SCRIPTS if scripts == "eval" else FUNCTIONS
        self.inspected = False
        self._claims = Claims(bins)
        self._inspecting, self._claiming = AsyncSharedRun(), AsyncSharedRun()
        self._loading = AsyncSharedRun()

    def wanted(self, call: ScriptCall) -> bool:
        """Whether ``call`` must wait for :meth:`prepare` (the hot path's test)."""
        return not self.inspected or self._claims.wanted(call)

    async def prepare(self, calls: Sequence[ScriptCall]) -> None:
        """The server's checks (once; a failure leaves them to the next call), and the
        bins settings of the policies not checked yet."""
        if not self.inspected:
            await self._inspecting.run(self._inspect)
        if self._claims.keys(calls):  # one caller's claims at a time: one connection
            await self._claiming.run(lambda: self._claim(calls))

    async def _inspect(self) -> None:
        told = self._choose if self.scripts == "auto" else None
        bins = self._claims.bins > 0
        await adrive(inspection(self._client, self._cluster, bins, told, self._wait), ERRORS)
        self.inspected = True

    def _choose(self, functions: bool) -> None:
        self.library = FUNCTIONS if functions else SCRIPTS

    async def _claim(self, calls: Sequence[ScriptCall]) -> None:
        client, bins = self._client, self._claims.bins
        for key, record in self._claims.keys(calls):
            checked = self._claims.on_checked(key)
            await adrive(claim(client, key, bins, checked, record), ERRORS)

    async def recovered(self, error: Exception, call: ScriptCall, again: bool) -> bool | Exception:
        """Whether ``call``, which failed with ``error`` through redis-py's API, may go
        ``again`` (a try is left): it found the library missing, now loaded, or its bin
        unclaimed, now claimed (as the backend's settling does for calls on its lanes:
        ``_settle``); or its refusal, to be settled in its reply's place: an ACL's
        ``NOPERM``, a ConfigError when a bin, or the store's record, holds another setting.
        """
        refused = refusal(error, call, self._claims.bins)
        if refused is not None:
            return refused
        if not again:
            return False
        if unclaimed(error):
            await self.reclaim([call])
            return True
        if missing(error):
            await self.load(self.library)
            return True
        return False

    async def reclaim(self, calls: Sequence[ScriptCall]) -> None:
        """Before ``calls`` go again: they would have written bins that hold no setting (a
        new bin, or one a flush or a restart emptied), and wrote nothing. The store's
        record of each policy's setting is checked again (claimed if gone), then each bin
        claimed for this client's setting.

        Raises:
            ConfigError: the store, or a bin, holds another setting.
        """
        client, bins = self._client, self._claims.bins
        for key in sorted({call.part.layouts[0].layout_key for call in calls}):
            self._claims.forget(key)
            await adrive(claim(client, key, bins, self._claims.on_checked(key)), ERRORS)
        for bin_key in sorted({record_key(call) for call in calls}):
            held = await self._fcall(self.library.claim(bin_key, bins))
            if int(held) != bins:  # type: ignore[call-overload]
                text = bin_key.decode("utf-8", "replace")
                raise other_setting(text.split("}:", 1)[-1], held, bins, text)

    async def _fcall(self, args: tuple[object, ...]) -> object:
        """A call of the library's through redis-py's own API, the library loaded again if
        it is missing."""
        for attempt in range(ATTEMPTS):
            try:
                return await self._client.execute_command(*args)
            except ERRORS as exc:
                if not missing(exc) or attempt == ATTEMPTS - 1:
                    raise
                await self.load(self.library)
        raise AssertionError("unreachable")

    async def load(self, library: Library) -> None:
        """The library (or the scripts) loaded through redis-py's own API, once for every
        caller that comes meanwhile."""
        await self._loading.run(lambda: self._load(library))

    async def _load(self, library: Library) -> None:
        for source in library.sources:
            if library is FUNCTIONS:
                await self._client.function_load(source, replace=True)
            else:
                await self._client.script_load(source)
