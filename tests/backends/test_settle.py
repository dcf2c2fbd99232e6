"""What a batch's results ask before they are replies (backends/_settle.py): no I/O."""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from freqguard import Policy, Rule
from freqguard.backends._settle import CLAIM, Settling, raise_failed
from freqguard.engine.plan import PolicyPlan
from freqguard.errors import ConfigError
from freqguard.script.calls import ScriptCall
from freqguard.script.contract import BINS_OTHER, HIT, UNCLAIMED

PLAN = PolicyPlan(Policy("p", Rule("5/minute", by="u")), "fg", bins=4)
CALL = ScriptCall(PLAN.parts[0], {"u": "a"}, None, 1, HIT)


def _unclaimed() -> ResponseError:
    return ResponseError(f"{UNCLAIMED} script: freqguard_0123456789ab_bin")


def test_a_bin_found_unclaimed_again_after_its_claim_is_claimed_again_a_few_times() -> None:
    """Found by the binned audit (4 processes x 3 threads under load): between a call's
    claim of its bin and its resend, another client's sweep deleted the emptied bin, and
    the resend's UNCLAIMED was the call's failure (BackendUnavailable) after one claim."""
    settling = Settling(cluster=False, bins=4)
    steps = []
    while (step := settling.next_step([CALL], [_unclaimed()])) is not None:
        steps.append(step)
    assert steps == [(CLAIM, [0])] * 3  # bounded: a bin that keeps vanishing is a failure
    assert settling.failed == {0}


def test_a_claim_that_holds_settles_as_a_reply() -> None:
    settling = Settling(cluster=False, bins=4)
    assert settling.next_step([CALL], [_unclaimed()]) == (CLAIM, [0])
    assert settling.next_step([CALL], [b"reply"]) is None
    assert settling.failed == set()


def test_a_bin_of_another_setting_fails_its_call_and_the_batch_settles_on() -> None:
    """Raised at once, it left the calls the store admitted beside it unseen: their hits
    stayed consumed (tests/backends/test_bins_refused_batches.py)."""
    other = ResponseError(f"{BINS_OTHER}8 in fg:{{#0}}:p, and this client has bins=4")
    settling = Settling(cluster=False, bins=4)
    results: list[object] = [b"admitted", other, _unclaimed()]
    assert settling.next_step([CALL] * 3, results) == (CLAIM, [2])
    refused = results[1]
    assert isinstance(refused, ConfigError)
    assert "bins=8" in str(refused)
    assert refused.__cause__ is other
    assert settling.failed == {1}
    replies: list[object] = ["reply", refused, "reply"]
    with pytest.raises(ConfigError) as raised:
        raise_failed(replies, results, cluster=False)
    assert raised.value is refused
    assert raised.value.results == replies  # the engine gives back what the others took
