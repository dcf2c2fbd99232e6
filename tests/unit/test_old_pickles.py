"""Errors and decisions pickled by the release before the rooms moved (0.1.0 as of commit
9a5b185) still unpickle: every class a pickle names is importable where it was."""

from __future__ import annotations

import base64
import pickle

from freqguard import BackendUnavailable, CapExceeded, ConfigError, Decision, PartialFailure, Policy
from freqguard.failure import CircuitOpen

#: pickle.dumps(protocol 4) of a dict of errors, a denial (a 2/minute window and a gcra of
#: burst 2, hit three times), its rule states and its policy, made by that version.
OLD = (
    "gASVegMAAAAAAAB9lCiMDGNpcmN1aXRfb3BlbpSMEWZyZXFndWFyZC5mYWlsdXJllIwLQ2lyY3VpdE9wZW6Uk5SM"
    "BG9wZW6URz/4AAAAAAAAhpRSlIwLdW5hdmFpbGFibGWUjBBmcmVxZ3VhcmQuZXJyb3JzlIwSQmFja2VuZFVuYXZh"
    "aWxhYmxllJOUjARkb3dulIWUUpR9lCiMCGFuc3dlcmVklImMBHNlbnSUiIwEbm9kZZROdWKMB3BhcnRpYWyUaAmM"
    "DlBhcnRpYWxGYWlsdXJllJOUjARwYXJ0lF2UKIwSZnJlcWd1YXJkLmRlY2lzaW9ulIwIRGVjaXNpb26Uk5QojAFw"
    "lIlHQJLAAAAAAACMD2ZyZXFndWFyZC5ydWxlc5SMBFJ1bGWUk5QpgZRdlCiMD2ZyZXFndWFyZC5yYXRlc5SMBFJh"
    "dGWUk5QpgZRdlChLAowIZGF0ZXRpbWWUjAl0aW1lZGVsdGGUk5RLAEs8SwCHlFKUZWKMAXKUhZRoHIwIU3RyYXRl"
    "Z3mUk5SMC3NsaWRpbmctbG9nlIWUUpSMAXeUToloMmViaB4pgZRdlChoIymBlF2UKEsDaChLAE0QDksAh5RSlGVi"
    "aCuFlGgujARnY3JhlIWUUpSMAWeUSwKJaD1lYoaUKGgfSwBKAIeTA0oAh5MDdJQoaDNLAIoFABgNjwBKAIyGR3SU"
    "hpROjAdiYWNrZW5klHSUUpRoC4wBeJSFlFKUfZQoaBCJaBGJaBJOdWJlhpRSlIwMY2FwX2V4Y2VlZGVklGgJjAtD"
    "YXBFeGNlZWRlZJSTlGhEjDBwb2xpY3kgJ3AnIGRlbmllZCBieSB3LCBnOyByZXRyeSBhZnRlciAxMjAwLjAwMHOU"
    "hpRSlIwGY29uZmlnlGgJjAtDb25maWdFcnJvcpSTlIwDYmFklIWUUpSMCGRlY2lzaW9ulGhEjAtydWxlX3N0YXRl"
    "c5RoGIwJUnVsZVN0YXRllJOUKYGUXZQoaB+JSwJLAEdATgAAAAAAAEdATgAAAAAAAGViaFopgZRdlChoM4lLAksA"
    "R0CiwAAAAAAAR0CSwAAAAAAAZWKGlIwGcG9saWN5lIwQZnJlcWd1YXJkLnBvbGljeZSMBlBvbGljeZSTlCmBlE59"
    "lCiMBG5hbWWUaBuMCG9uX2Vycm9ylE6MBXJ1bGVzlGgfaDOGlHWGlGJ1Lg=="
)


def test_what_the_previous_layout_pickled_unpickles() -> None:
    found = pickle.loads(base64.b64decode("".join(OLD)))
    assert isinstance(found["circuit_open"], CircuitOpen)
    assert found["circuit_open"].retry_after == 1.5
    assert isinstance(found["unavailable"], BackendUnavailable)
    assert found["unavailable"].sent
    assert isinstance(found["partial"], PartialFailure)
    assert isinstance(found["cap_exceeded"], CapExceeded)
    assert isinstance(found["config"], ConfigError)
    decision = found["decision"]
    assert isinstance(decision, Decision)
    assert (decision.allowed, decision.retry_after) == (False, 1200.0)
    assert [(s.rule.id, s.capacity, s.remaining) for s in found["rule_states"]] == [
        ("w", 2, 0),
        ("g", 2, 0),
    ]
    assert found["cap_exceeded"].decision == decision
    assert isinstance(found["policy"], Policy)
    assert [rule.id for rule in found["policy"].rules] == ["w", "g"]
