"""No refusal of a URL shows any part of its password: a unix socket's, one holding an '@'
before its '/', '?' or '#', one holding brackets, one in an option; and a URL without a
user (hostless, a Sentinel service holding '@') is not taken for one holding a password.
A review's findings, written failing first, and a property over generated passwords."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from freqguard import ConfigError
from freqguard.backends.urls import parse_url

# -- 1. unix:// is skipped by _cut_password: a password holding '?' or '#' ---------------


@pytest.mark.parametrize(
    ("url", "secret", "code"),
    [
        ("unix://:Zq7?Wx9Lm4@/var/run/redis.sock", "Zq7?Wx9Lm4", "%3F"),
        ("unix://app:Zq7?Wx9Lm4@/var/run/redis.sock?db=0", "Zq7?Wx9Lm4", "%3F"),
        ("unix://:Zq7#Wx9Lm4@/var/run/redis.sock?db=0", "Zq7#Wx9Lm4", "%23"),
    ],
    ids=["question-mark", "with-user-and-db", "hash"],
)
def test_a_unix_url_password_holding_a_mark_is_refused_and_masked(
    url: str, secret: str, code: str
) -> None:
    """``_cut_password`` returns at once for ``unix://`` (its path may hold an ``@``), so
    a socket URL's password (``unix://:password@/path``: redis-py reads the userinfo of a
    unix URL too) holding an unencoded ``?`` is read as options and shown whole: "unknown
    option 'Wx9Lm4@/var/run/redis.sock' in 'unix://:Zq7?Wx9Lm4@/var/run/redis.sock'" (the
    mask needs the ``@`` before the first ``?``). With a ``#`` the URL is taken, as
    ``unix://:Zq7``: the socket path and the password's rest silently dropped, the failure
    at the first call. Who: a socket-connected Redis with a generated password (the same
    password in a ``redis://`` URL is refused, masked). Expected: refused naming the
    percent-encoding, the password masked. Got: shown whole, or taken."""
    with pytest.raises(ConfigError) as refused:  # got: taken, for the '#'
        parse_url(url)
    message = str(refused.value)
    assert secret not in message, message  # got: shown whole
    assert "Wx9Lm4" not in message, message
    assert code in message, message


# -- 2. an '@' in the password before its '?', '/' or '#' ---------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://app:Kx@9?Lm4Rt8@10.0.0.1:6379/0",
        "redis://app:Kx@9/Lm4Rt8@10.0.0.1:6379/0",
        "redis://app:Kx@9#Lm4Rt8@10.0.0.1:6379/0",
        "redis+cluster://app:Kx@9?Lm4Rt8@10.0.0.1:7000,10.0.0.2:7000",
        "redis+sentinel://app:Kx@9?Lm4Rt8@10.0.0.1:26379/orders",
    ],
    ids=["question-mark", "slash", "hash", "cluster", "sentinel"],
)
def test_a_password_holding_an_at_before_its_cut_is_refused_and_masked(url: str) -> None:
    """An unencoded ``@`` in a password is taken (the address starts after the last
    ``@``: ``_shown`` says "a password may hold an @ ... unescaped"). But
    ``_cut_password`` returns when an ``@`` comes before the first ``/``, ``?`` or ``#``
    (``"@" in rest[:cut]``), taking it for the userinfo's end: a password
    ``Kx@9?Lm4Rt8`` (both marks, as a generator's symbols fall) is read as user ``app``,
    password ``Kx``, host ``9`` and the options ``Lm4Rt8@10.0.0.1:6379/0``: "unknown option
    'Lm4Rt8@10.0.0.1:6379/0' in 'redis://app:***@9?Lm4Rt8@...'" (a Sentinel URL's "no
    service name in ...", the path's "got '/Lm4Rt8@...'" alike); with a ``#`` the URL is
    taken, to connect to host ``9`` with the password ``Kx``. Expected: refused, naming the
    percent-encoding, no part of the password after its ``@`` shown. Got: shown, or
    taken."""
    with pytest.raises(ConfigError) as refused:  # got: taken, for the '#'
        parse_url(url)
    message = str(refused.value)
    assert "Lm4Rt8" not in message, message  # got: the password's tail


# -- 3. a password holding '[' and ']': urlsplit's own error quotes them -----------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://app:Zq[Lm4Rt8]x@10.0.0.1:6379/0",
        "rediss://:Zq[Lm4Rt8]x@10.0.0.1:6380",
        "redis+cluster://app:Zq[Lm4Rt8]x@10.0.0.1:7000,10.0.0.2:7000",
    ],
    ids=["redis", "rediss", "cluster"],
)
def test_a_password_holding_brackets_is_not_shown_by_the_url_error(url: str) -> None:
    """``_direct`` turns ``urlsplit``'s ``ValueError`` into "cannot read backend URL
    {masked}: {exc}", the URL masked but ``exc`` as Python wrote it, which quotes what
    stood between the brackets: "...: 'Lm4Rt8' does not appear to be an IPv4 or IPv6
    address". A generated password with ``[`` and ``]`` (common symbols) is shown in part,
    in a message a configuration error's log keeps. Expected: refused, nothing of the
    password shown. Got: its bracketed part."""
    with pytest.raises(ConfigError) as refused:
        parse_url(url)
    assert "Lm4Rt8" not in str(refused.value), str(refused.value)


# -- 4. _cut_password's own message takes an '@' of the query for the userinfo's end -------


def test_the_cut_password_message_shows_no_text_after_an_at_in_the_query() -> None:
    """With no userinfo, ``_cut_password`` refuses a URL whose ``@`` stands in a fragment
    or a query item that is no text option, and builds its message as
    ``{scheme}://{user}:***@{what follows the last '@'}``. A ``?password=`` holding an
    unencoded ``#`` then an ``@`` (``Zq7#Wx9@Lm4Rt8``) is refused as "the user or password
    in 'redis://10.0.0.1:***@Lm4Rt8' holds a '/'": the password's tail shown as the host,
    the host shown as the user, and a ``/`` named that no password holds. Expected: no
    part of the password shown. Got: ``Lm4Rt8``."""
    with pytest.raises(ConfigError) as refused:
        parse_url("redis://10.0.0.1:6379/0?password=Zq7#Wx9@Lm4Rt8")
    assert "Lm4Rt8" not in str(refused.value), str(refused.value)


# -- 5. URLs with no user or password refused as holding one ------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis:///0?client_name=api@eu",  # hostless: redis-py's localhost:6379
        "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/orders%40eu/0",  # a service name
    ],
    ids=["hostless", "sentinel-service"],
)
def test_a_url_with_no_userinfo_is_not_refused_as_holding_a_password(url: str) -> None:
    """``parse_url`` takes ``redis:///0?client_name=api`` (no host: redis-py's localhost,
    as ``_nodes`` says) and a Sentinel service name of any non-space characters
    (``_sentinel``: ``[^\\s/]{1,256}``). This round's ``_host`` wants one character at
    least, and an ``@`` in a path refuses: ``redis:///0?client_name=api@eu`` (a client
    name as an e-mail address) and a service ``orders@eu`` are refused as "the user or
    password in 'redis://:***@eu' holds a '/'" (the Sentinel one masking part of the
    address), URLs holding neither; both were taken before this round. Expected: taken.
    Got: refused."""
    assert parse_url(url).kind in ("redis", "sentinel")  # got: ConfigError


def test_a_sentinel_service_names_its_at_sign_encoded() -> None:
    """An ``@`` past a Sentinel URL's address is a password's tail as often as a service
    name's (``app:2718/QZXJK@sentinel-1``: a user and a password holding a ``/``, or a
    sentinel ``app:2718`` and a service ``QZXJK@sentinel-1``): a service name writes it
    ``%40``, and one unencoded is refused naming both fixes."""
    assert parse_url("redis+sentinel://10.0.0.1/orders%40eu").service == "orders@eu"
    with pytest.raises(ConfigError, match="%40") as refused:
        parse_url("redis+sentinel://10.0.0.1/orders@eu")
    assert "service name" in str(refused.value)


# -- 6. the property: no refusal shows a password, for every scheme -----------------------

_MARKS = "QZXJK"  # letters no message has in capitals: a window of two is the password's
_PASSWORDS = st.text(string.ascii_letters + string.digits + "/?#@&=:%[]!$*+,;-._~", min_size=6)
_FORMS = (
    "redis://app:{}@10.0.0.1:6379/0",
    "rediss://:{}@10.0.0.1:6380/0?ssl_cert_reqs=required",
    "redis+cluster://app:{}@10.0.0.1:7000,10.0.0.2:7000",
    "redis+sentinel://app:{}@10.0.0.1:26379,10.0.0.2:26379/orders/0",
    "unix://:{}@/var/run/redis.sock?db=0",
)


def _shown(message: str, password: str) -> str | None:
    """The password, or a window of four of its characters with two marks, in ``message``."""
    if password in message:
        return password
    windows = (password[i : i + 4] for i in range(len(password) - 3))
    return next((w for w in windows if sum(c in _MARKS for c in w) >= 2 and w in message), None)


@settings(
    max_examples=400, derandomize=True, database=None, deadline=None,
    suppress_health_check=list(HealthCheck),
)  # fmt: skip
@given(form=st.sampled_from(_FORMS), password=_PASSWORDS.map(lambda p: f"QZ{p}XJ"))
@example(form=_FORMS[4], password="QZ?XJK")
@example(form=_FORMS[0], password="QZ@9?XJK")
@example(form=_FORMS[0], password="Q[ZXJK]x")
def test_no_refusal_shows_a_password(form: str, password: str) -> None:
    """Every scheme's URL with a password of printable ASCII (``/?#@&=:%`` and brackets
    among it): a refusal must not show it, nor four characters of it. Got: findings 1-3
    above (each an ``@example``)."""
    message = ""
    try:
        parse_url(form.format(password))
    except ConfigError as exc:
        message = str(exc)
    assert _shown(message, password) is None, message
