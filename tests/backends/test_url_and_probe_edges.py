"""A password holding '?' then '&' or '=' (still read as options, and shown), and an
asyncio cluster not reached at its first call with wait_replicas (the WAIT probe's
refusal named a node the client did not know yet): a review's findings, failing first."""

from __future__ import annotations

import asyncio

import pytest

from freqguard import AsyncGuard, ConfigError, Policy, Rule, async_backend_from_url
from freqguard.backends.urls import parse_url
from tests.servers import free_port

# -- 1. a password holding '?' and then '&' or '=' is still read as options, and shown ------


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("redis://app:Zq7?k&Wp2x@10.0.0.1:6379", "Zq7?k&Wp2x"),
        ("redis+cluster://app:Zq7?k&Wp2x@10.0.0.1:7000,10.0.0.2:7000", "Zq7?k&Wp2x"),
        ("redis+sentinel://app:Zq7?k&Wp2x@10.0.0.1:26379/orders", "Zq7?k&Wp2x"),
        ("redis://app:Zq7k?W=p2x@10.0.0.1:6379/0", "Zq7k"),
    ],
    ids=["ampersand", "ampersand-cluster", "ampersand-sentinel", "equals"],
)
def test_a_password_holding_a_question_mark_then_an_ampersand_or_equals_is_masked(
    url: str, secret: str
) -> None:
    """``_cut_password`` refuses a user or password holding an unencoded ``?`` only when
    the first "option" after it holds an ``@`` with no ``=`` before it (to let
    ``?username=a@b`` through). A generated password that holds ``?`` and, after it, an
    ``&`` (``Zq7?k&Wp2x``: the first "option" is ``k``, no ``@``) or an ``=``
    (``Zq7k?W=p2x``: ``=`` before the ``@``) passes that test and is read as options, as
    before the fix: "unknown option 'k' in 'redis://app:Zq7?k&Wp2x@10.0.0.1:6379'" (the
    whole password in the message, in any log of configuration errors), or, with ``=``,
    the part before ``?`` shown (``redis://app:Zq7k?W=***``; a Sentinel URL's "port must
    be an integer ..., got 'Zq7'"). Expected: the refusal naming %3F, no part of the
    password shown."""
    with pytest.raises(ConfigError) as refused:
        parse_url(url)
    message = str(refused.value)
    assert secret not in message, message  # got: shown
    assert "%3F" in message, message  # got: unknown option 'k' / a bad port


# -- 2. the WAIT probe of an asyncio cluster client not yet connected: AttributeError --------


def test_an_async_cluster_not_reachable_at_its_first_call_is_answered_by_on_error() -> None:
    """``_waits`` (``wait_replicas``) on a cluster asks the default node first, and a
    failure there is named by ``client.get_default_node().name``, read before it is known
    to be a refusal. An asyncio cluster client learns its nodes at its first command: a
    cluster not reachable then (a service started before its Redis Cluster, a cluster
    down at a deploy) has no default node yet (None), so the probe raises
    ``AttributeError: 'NoneType' object has no attribute 'name'`` out of the hit, past
    ``on_error``, at every call until the cluster answers. With ``scripts=eval`` nothing
    asks the store before the probe (the Functions probe, which fails as a
    BackendUnavailable, is skipped). Expected: the store's failure, answered by
    ``on_error="allow"`` as without ``wait_replicas``: a fail-open decision."""
    url = f"redis+cluster://127.0.0.1:{free_port()}?wait_replicas=1&scripts=eval"

    async def hit() -> str:
        backend = async_backend_from_url(url)
        guard = AsyncGuard(backend, [Policy("p", Rule("5/minute"))], on_error="allow")
        try:
            return (await guard.hit("p")).source
        finally:
            await guard.aclose()

    assert asyncio.run(hit()) == "fail-open"  # got AttributeError ('NoneType' ... 'name')
