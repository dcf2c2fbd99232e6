"""A user or password holding an unencoded '/', '?' or '#' is refused naming its
percent-encoding, masked, however the rest reads (digits or nothing before the '?', '&' or
'=' after it), and an IPv6 address with a zone is taken beside an option holding '@'. A
review's findings, written failing first."""

from __future__ import annotations

import pytest

from freqguard import ConfigError
from freqguard.backends.urls import parse_url

# -- 1. a password whose part before '?' is empty or digits passes for host:port ---------


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("redis://default:?k9&Lm2@10.0.0.1:6379/0", "?k9&Lm2"),
        ("redis://default:2718?pq&rs@10.0.0.1:6379/0", "2718?pq&rs"),
        ("redis+cluster://default:?k9&Lm2@10.0.0.1:7000,10.0.0.2:7000", "?k9&Lm2"),
        ("redis+sentinel://default:?k9&Lm2@10.0.0.1:26379/orders", "?k9&Lm2"),
        ("redis://:4242?client_name=Zq7@10.0.0.1:6379", "4242?client_name=Zq7"),
    ],
    ids=["leading-mark", "digits-first", "cluster", "sentinel", "taken-as-client-name"],
)
def test_a_password_whose_start_reads_as_a_port_is_refused_and_masked(
    url: str, secret: str
) -> None:
    """``_cut_password`` now also refuses a URL whose text before the ``?`` is no
    ``host[:port]`` list (``_host``). But the user and the start of the password read as
    one: ``default:`` + a password starting with ``?`` (``?k9&Lm2``, a generator's symbol
    first), or with digits before its ``?`` (``2718?pq&rs``), is ``host:port`` (a host
    ``default`` and an empty or numeric port), so the URL passes, and is read as options:
    "unknown option 'k9' in 'redis://default:?k9&Lm2@10.0.0.1:6379/0'" (the whole password
    in the message, in any log of configuration errors; a Sentinel URL's "port must be an
    integer ..., got ''" shows it too). With an option's name after the ``?``
    (``:4242?client_name=Zq7@10.0.0.1``) the URL is taken: redis-py connects to
    localhost:4242 and sends the rest of the password as the client name (``CLIENT LIST``
    shows it to every client). Expected: the refusal naming %3F, the password masked."""
    with pytest.raises(ConfigError) as refused:  # got: taken (client_name), for the last
        parse_url(url)
    message = str(refused.value)
    assert secret not in message, message  # got: shown whole
    assert "%3F" in message, message  # got: unknown option 'k9' / a bad port


# -- 2. an IPv6 address with a zone is taken for a password holding '?' -------------------


def test_an_ipv6_address_with_a_zone_and_an_at_in_an_option_is_taken() -> None:
    """A link-local IPv6 address names its interface (``[fe80::1%25eth0]``: RFC 6874;
    redis-py connects to ``fe80::1%eth0``), and ``parse_url`` takes it
    (``redis://[fe80::1%25eth0]:6379?client_name=ab``). With an ``@`` in the first option's
    value (``client_name=api@eu``, a user name as an e-mail address), ``_cut_password``
    checks the address with ``_host``, whose IPv6 form has no ``%``: the URL is refused,
    "the user or password in 'redis://[fe80:***@eu' holds a '?'", though it holds neither
    (and the message shows a garbled address). Expected: taken, as without the ``@``."""
    assert parse_url("redis://[fe80::1%25eth0]:6379?client_name=ab").url  # taken
    target = parse_url("redis://[fe80::1%25eth0]:6379?client_name=api@eu")  # got: refused
    assert target.options["client_name"] == "api@eu"
