"""Backend URLs at their edges, each a review's finding written failing first: no refusal
shows a password (a user holding '@', a password option cut by '&' or '#', a URL with no
'://' or no text at all), a legitimate URL is taken (a unix socket's path holding '@'
after a password, an IPv6 zone on a sentinel or a cluster's later node, a misspelt option
holding '@' named as such), and a Sentinel password of digits before its '/' refused."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from freqguard import ConfigError
from freqguard.backends.urls import parse_url

_MARKS = "QZXJK"  # letters no message has in capitals: a window holding two is a secret's
_SETTINGS = settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def _leak(message: str, secret: str) -> str | None:
    """The secret, or a window of four of its characters holding two marks, in
    ``message``."""
    if secret in message:
        return secret
    windows = (secret[i : i + 4] for i in range(len(secret) - 3))
    return next((w for w in windows if sum(c in _MARKS for c in w) >= 2 and w in message), None)


def _refusal(url: str) -> str:
    with pytest.raises(ConfigError) as refused:
        parse_url(url)
    return str(refused.value)


# -- 1. a user name holding an unencoded '@' unmasks the password -------------------------

_USER_AT_FORMS = (
    "redis://alice@corp:{}@10.0.0.1:6379/0?db=x",
    "rediss://alice@corp:{}@10.0.0.1:99999/0",
    "redis+cluster://alice@corp:{}@10.0.0.1:7000,10.0.0.2:7000?socket_timeout=0",
    "redis+sentinel://alice@corp:{}@10.0.0.1:26379/orders/0?foo=1",
    "unix://alice@corp:{}@/var/run/redis.sock?db=x",
)


@_SETTINGS
@given(
    form=st.sampled_from(_USER_AT_FORMS),
    password=st.text(string.ascii_letters + string.digits + "!$*+,;-._~", min_size=1).map(
        lambda p: f"QZ{p}XJ"
    ),
)
@example(form=_USER_AT_FORMS[0], password="QZXJK7pw")
def test_a_user_name_holding_an_at_does_not_unmask_the_password(form: str, password: str) -> None:
    """A user name written as an e-mail address with its ``@`` unencoded
    (``redis://alice@corp:pw@host``) is taken: urllib and redis-py split the address at the
    *last* ``@`` (user ``alice@corp``, password ``pw``: ``backend_from_url`` connects with
    them). But ``_shown``'s mask, ``^(scheme://[^/@:?#]*):[^/?#]*@``, wants the user free of
    ``@``; it does not match, and the URL is shown as given, password and all, by every
    other refusal (a bad db, port, timeout, unknown option). Who: anyone whose Redis/ACL
    user is an e-mail address (managed Redis, LDAP-backed ACLs) and who makes any other
    mistake in the URL. Expected: the refusal, no part of the password in it. Got:
    ``... (in 'redis://alice@corp:QZXJK7pw@10.0.0.1:6379/0?db=x')``."""
    message = _refusal(form.format(password))
    assert _leak(message, password) is None, message


# -- 2. a secret option's mask ends at ';', a space, a quote or ')' ------------------------

_OPTION_FORMS = (
    "redis://10.0.0.1:6379/0?password={}&db=x",
    "rediss://10.0.0.1:6380/0?ssl_password={}&socket_timeout=0",
    "redis+sentinel://10.0.0.1:26379/orders?sentinel_password={}&db=x",
    "redis://10.0.0.1:6379/0?pasword={}",  # misspelt: its value is masked too
)


@_SETTINGS
@given(
    form=st.sampled_from(_OPTION_FORMS),
    password=st.text(string.ascii_letters + string.digits + ";'\")! -", min_size=1).map(
        lambda p: f"QZ{p}XJ"
    ),
)
@example(form=_OPTION_FORMS[0], password="Zq7;QZXJK")
@example(form=_OPTION_FORMS[1], password="Zq7 QZXJK")
@example(form=_OPTION_FORMS[2], password="Zq7)QZXJK")
@example(form=_OPTION_FORMS[3], password="Zq7'QZXJK")
def test_a_password_option_is_masked_whole(form: str, password: str) -> None:
    """``_shown`` masks an option's value with ``([?&])([^=&]*)=([^&'\\";)\\s]*)``: the value
    ends at ``&`` *or* at a quote, ``;``, ``)`` or white space ("where a message quoting
    the URL goes on"), but it is given the URL alone. ``parse_qs`` splits only at ``&``, so
    ``?password=Zq7;QZXJK`` is the password ``Zq7;QZXJK`` (``;`` is a sub-delimiter, legal
    unencoded in a query) and any other refusal shows ``password=***;QZXJK``. Who: a
    generated password with ``;``, a quote, ``)`` or a space (common symbols) given as
    ``?password=``, ``?ssl_password=`` or ``?sentinel_password=``, and a mistake elsewhere
    in the URL. Expected: the whole value masked. Got: all of it after that character."""
    message = _refusal(form.format(password))
    assert _leak(message, password) is None, message


# -- 3. a URL without '://' (or not a str) is shown whole; so is an unsupported scheme ----


@pytest.mark.parametrize(
    "url",
    [
        "redis:/:QZXJK7pw@10.0.0.1:6379/0",  # one slash dropped
        "redis:default:QZXJK7pw@10.0.0.1:6379/0",  # both dropped
        b"redis://:QZXJK7pw@10.0.0.1:6379/0",  # bytes, as os.environb gives it
        "redis:/:QZXJK7pw@10.0.0.1:6379/0?ssl_ca_certs=file://x",  # '://' further on
    ],
    ids=["one-slash", "no-slashes", "bytes", "scheme-holding-the-password"],
)
def test_a_url_that_is_no_scheme_url_is_refused_masked(url: object) -> None:
    """``_scheme`` refuses a value without ``://`` as "backend URL must look like
    scheme://..., ...; got {url!r}": the value as given, not ``_shown``, so a URL one slash
    short (``redis:/:pw@host``: a typo, or a template that dropped ``//``) or given as bytes
    shows its password whole. With a ``://`` later in the URL (a ``file://`` option value)
    the text before it is the "scheme", and "unsupported backend URL scheme
    'redis:/:qzxjk7pw@...'" shows it, password and all (lower-cased), outside the masked
    URL. Who: anyone with a typo in the ``//`` of a URL holding a password. Expected: a
    refusal naming the ``scheme://`` form, the password masked. Got: shown whole."""
    with pytest.raises(ConfigError) as refused:
        parse_url(url)  # type: ignore[arg-type]  # the check is for what is not a str too
    message = str(refused.value)
    assert "QZXJK7pw".lower() not in message.lower(), message


# -- 4. a socket path holding an '@' after a user or password -----------------------------


@pytest.mark.parametrize(
    "url",
    [
        "unix://:Zq7pw@/run/redis@main/redis.sock",
        "unix://app:Zq7pw@/run/redis@main/redis.sock?db=1",
    ],
    ids=["password", "user-password-db"],
)
def test_a_unix_url_with_a_password_and_an_at_in_its_path_is_taken(url: str) -> None:
    """``unix:///run/redis@main/redis.sock?db=1`` is taken (``_cut_password``: "no user: a
    path may hold an @"), and a socket path with an ``@`` is ordinary (a systemd template
    instance's directory, ``redis@main``). With a password before it
    (``unix://:pw@/run/redis@main/redis.sock``: urllib and redis-py read password ``pw``,
    path ``/run/redis@main/redis.sock``) the check no longer returns early, sees an ``@``
    in the path and refuses: "a user or password in 'unix://***' holds '/', which ends it
    unencoded", a URL holding no such thing. Who: a socket-connected Redis with
    ``requirepass`` whose socket lives under a templated directory. Expected: taken, the
    path and password as urllib reads them. Got: refused."""
    target = parse_url(url)  # got: ConfigError
    assert target.url.startswith("unix://"), target
    assert target.url.endswith("/run/redis@main/redis.sock"), target


# -- 5. an IPv6 address with a zone, as a sentinel or a cluster's further node ------------


def test_an_ipv6_zone_is_taken_for_a_sentinel_and_every_cluster_node() -> None:
    """``redis://[fe80::1%25eth0]:6379`` is taken (round 4: RFC 6874's zone; redis-py
    connects to ``fe80::1%eth0``), and so is a cluster URL's *first* node, which redis-py
    reads. A sentinel's address and a cluster's further nodes go through ``_address``,
    whose IPv6 form is ``\\[[0-9A-Fa-f:.]+\\]``, no ``%``: "a sentinel's address must be
    host:port or [ipv6]:port, got '[fe80::1%25eth0]:26379'". Who: sentinels or cluster
    nodes on a link-local network (the same address that works in ``redis://``).
    Expected: taken, the host as redis-py reads a URL's (``fe80::1%eth0``). Got:
    refused."""
    sentinel = parse_url("redis+sentinel://[fe80::1%25eth0]:26379/mymaster")  # got: refused
    assert sentinel.sentinels == (("fe80::1%eth0", 26379),)
    cluster = parse_url("redis+cluster://[fe80::1%25eth0]:7000,[fe80::2%25eth0]:7000")
    assert cluster.nodes == (("fe80::2%eth0", 7000),)


# -- 6. a misspelt option holding an '@' is refused as a password holding a '/' or '?' ----


@pytest.mark.parametrize(
    ("url", "option"),
    [
        ("redis://10.0.0.1:6379/0?user=alice@corp.example", "user"),
        ("rediss://10.0.0.1:6380?ssl_ca_cert=/etc/ssl/ca@corp.pem", "ssl_ca_cert"),
        ("redis+sentinel://10.0.0.1:26379/orders?sentinel_user=ops@corp", "sentinel_user"),
    ],
    ids=["user", "ssl_ca_cert", "sentinel_user"],
)
def test_a_misspelt_option_holding_an_at_is_named(url: str, option: str) -> None:
    """A URL with no user or password at all whose one mistake is an option's name
    (``?user=`` for ``?username=``) is refused by name, with the likely one ("unknown
    option 'user' (did you mean 'username'?)"). When the value holds an ``@`` (a user name
    as an e-mail address, a file path), ``_cut_password`` runs first and refuses it as "a
    user or password in 'redis://***' holds '/', which ends it unencoded: percent-encode
    it (%2F; '@' is %40)": a password the URL has not, a ``/`` from the ``/0`` (or a ``?``),
    the URL masked to its scheme, and the option never named. Who: anyone misspelling a
    text option whose value holds ``@``. Expected: the refusal naming the option. Got:
    a password blamed, the option unnamed."""
    message = _refusal(url)
    assert f"unknown option {option!r}" in message, message
    assert "user or password" not in message, message


# -- 7. a Sentinel password of digits before its '/' ---------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://app:2718/QZXJK@10.0.0.1:26379",
        "redis+sentinel://app:2718/QZXJK@10.0.0.1:26379/orders",
        "redis+sentinel://app:2718/QZXJK@10.0.0.1/orders",
        "redis+sentinel://app:2718/QZXJK@sentinel-1",
    ],
    ids=["taken", "service-blamed", "no-port", "a-name"],
)
def test_a_sentinel_password_of_digits_before_its_slash_is_refused(url: str) -> None:
    """Round 4 refused ``redis://app:2718/pq@host`` (digits before the ``/``: ``app:2718``
    reads as ``host:port``) by the ``@`` in its path. A Sentinel URL's path is exempt ("a
    Sentinel service's name may hold an @") once the address reads as host:port, so
    ``redis+sentinel://app:2718/QZXJK@10.0.0.1:26379`` is *taken*: a sentinel ``app`` on
    port 2718, the service ``QZXJK@10.0.0.1:26379`` (the password's tail, which redis-py's
    MasterNotFoundError will quote), no password. With the service written after it,
    the refusal is "after the service name comes the database number (/0, /1, ...), got
    '/orders'": masked, but pointing at the db. Who: a Sentinel user whose generated
    password starts with digits then ``/``. Expected: refused naming ``%2F``, the password
    unshown. Got: taken, or the db blamed. The sentinel's address without a port
    (``...@10.0.0.1/orders``, ``...@sentinel-1``) read as a service named with an ``@``
    was still taken: an unencoded ``@`` in a service name is now refused too (``%40``)."""
    message = _refusal(url)  # got: taken, for the first
    assert "%2F" in message, message
    assert _leak(message, "2718/QZXJK") is None, message


# -- 8. a secret option's value holding an unencoded '&' -----------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://10.0.0.1:6379/0?password=Zq7&QZXJK",
        "rediss://10.0.0.1:6380/0?ssl_password=Zq7&QZXJK",
        "redis+sentinel://10.0.0.1:26379/orders?sentinel_password=Zq7&QZXJK",
    ],
    ids=["password", "ssl_password", "sentinel_password"],
)
def test_a_secret_option_holding_an_ampersand_is_refused_masked(url: str) -> None:
    """A password given as ``?password=`` holding an unencoded ``&`` is cut there by
    ``parse_qs``: its tail becomes an option's name, and the refusal quotes that name
    outside the mask: "unknown option 'QZXJK' in 'redis://...?password=***&QZXJK'". Round 4
    refused the same password in the user part (``:k9&Lm2@``) without showing it; in the
    query its tail is shown twice. Who: a generated password with ``&`` (a common symbol)
    put in ``?password=`` unencoded. Expected: refused (naming ``%26`` would be the fix),
    no part of the password in the message. Got: its tail, as the unknown option."""
    message = _refusal(url)
    assert "QZXJK" not in message, message
