"""The client's address behind trusted proxies, as a key nobody can rotate.

Only the peer (the TCP connection) is a fact; every header is what someone wrote. A header
is believed only when the peer is a trusted proxy, only the one header those proxies are
configured to set, and only as far as trusted proxies vouch for it: from the right, each
hop a trusted proxy appended is skipped, and the first other hop is the client. Whatever
is keyed is a parsed address (ports, brackets, zones and quoting stripped, IPv4-mapped IPv6
as IPv4), widened to a network prefix, so no spelling of one client makes a second key.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Iterator

from freqguard.errors import ConfigError, shown
from freqguard.integrations._request import KEY_MAKERS, KeyFunc, RequestInfo, declared

__all__ = ["FORWARDING_HEADERS", "client_ip", "hop_key"]

FORWARDING_HEADERS: tuple[str, ...] = ("x-forwarded-for", "forwarded", "x-real-ip")

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: What ipaddress makes of one proxy (a network given alone is one, not its addresses).
_ADDRESSES = (
    ipaddress.IPv4Address,
    ipaddress.IPv6Address,
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
)

# a port after the address: digits, or an RFC 7239 obfuscated port ("_abc")
_PORT = re.compile(r"\d{1,5}|_[A-Za-z0-9._\-]+")


def client_ip(
    trusted_proxies: str | Iterable[str] = (),
    *,
    header: str | None = None,
    ipv4_prefix: int = 32,
    ipv6_prefix: int = 64,
) -> KeyFunc:
    """Key requests by the client's address (dimension ``client``).

    The peer's address, unless the peer is a trusted proxy: then ``header`` (the one your
    proxies set; never whichever a request happens to carry) is read from the right,
    hops inside ``trusted_proxies`` are skipped, and the first other hop is the client.
    The lines of a repeated header form one list, in order. When every hop is trusted, the
    farthest one is the client.

    A hop that is not an address (``unknown``, an obfuscated ``_name``, garbage, an empty
    item) stops the walk, and the request is keyed on the nearest trusted hop to its right
    (the proxy that passed it on, or the peer): a value nobody vouched for is never a key,
    so rotating it buys nothing. Those requests share that proxy's budget.

    Args:
        trusted_proxies: addresses or networks (``"10.0.0.0/8"``) of your proxies.
        header: ``"x-forwarded-for"`` (nginx, most load balancers; the default),
            ``"forwarded"`` (RFC 7239, the ``for=`` parameter) or ``"x-real-ip"``; read
            only behind ``trusted_proxies`` (given without them, it is refused).
        ipv4_prefix: key IPv4 clients by this network prefix (32: each address).
        ipv6_prefix: key IPv6 clients by this network prefix; 64 by default, because one
            subscriber usually holds a whole /64 and could rotate addresses inside it.

    Raises:
        ConfigError: for a bad proxy address, an unknown header, a header without
            trusted proxies (it would never be read), or a prefix out of range.
    """
    networks = _networks(trusted_proxies)
    wanted = "x-forwarded-for" if header is None else header
    wanted = wanted.lower() if isinstance(wanted, str) else wanted
    if not isinstance(wanted, str) or wanted not in FORWARDING_HEADERS:
        allowed = ", ".join(FORWARDING_HEADERS)
        raise ConfigError(f"client_ip header must be one of {allowed}; got {shown(header)}")
    if header is not None and not networks:
        raise ConfigError(
            f"client_ip(header={shown(header, 40)}) reads the header only from a trusted proxy, "
            "and trusted_proxies names none: give your proxies' addresses, "
            "client_ip(['10.0.0.0/8'], header=...), or leave header= out"
        )
    hops_of = _forwarded_hops if wanted == "forwarded" else _list_hops
    prefix = {
        4: _prefix("ipv4_prefix", ipv4_prefix, 32),
        6: _prefix("ipv6_prefix", ipv6_prefix, 128),
    }

    def widen(address: _Address) -> str:
        return _widened(address, prefix[address.version])

    @functools.lru_cache(maxsize=4096)
    def judge_peer(peer: str) -> tuple[_Address | None, str, bool]:
        """The peer's address, its key, and whether it is a trusted proxy: memoised
        (bounded), since the same few peers ask on every request."""
        address = _address(peer)
        if address is None:
            return None, peer, False  # a server-given label (a socket path), not a header
        return address, widen(address), bool(networks) and _trusted(address, networks)

    def key(request: RequestInfo) -> dict[str, object]:
        peer = request.client
        if not peer:
            return {"client": ""}
        vouched, text, proxy = judge_peer(peer)
        if proxy:
            assert vouched is not None
            for hop in hops_of(request.header_lines(wanted)):
                address = _address(hop)
                if address is None:
                    break  # nobody vouches for what lies left of an invalid hop
                vouched = address
                if not _trusted(address, networks):
                    break
            text = widen(vouched)
        return {"client": text}

    return declared(key, "client")


def _networks(trusted: str | Iterable[str]) -> tuple[_Network, ...]:
    if not isinstance(trusted, (str, Iterable, *_ADDRESSES)) or isinstance(trusted, bytes):
        raise ConfigError(
            "trusted_proxies must be an address or network, or a list of them "
            f"(['10.0.0.0/8']), got {shown(trusted, 60)}"
        )
    one = (str, *_ADDRESSES)  # a network is iterable too: its addresses, one by one
    items = [trusted] if isinstance(trusted, one) else list(trusted)
    networks = []
    for item in items:
        try:
            if not isinstance(item, one):
                raise TypeError(item)  # an int is an address to ipaddress: never meant
            networks.append(ipaddress.ip_network(item, strict=False))
        except (TypeError, ValueError):
            raise ConfigError(
                "trusted_proxies must be IP addresses or networks like '10.0.0.0/8', got "
                f"{shown(item)}"
            ) from None
    return tuple(networks)


def _prefix(name: str, value: object, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ConfigError(f"{name} must be an integer from 0 to {most}, got {shown(value)}")
    return value


def hop_key(hop: str) -> str | None:
    """One hop of a forwarding header as :func:`client_ip` keys a client by default (an
    IPv4 address whole, an IPv6 one by its /64); None when it is not an address (never a
    key: a value nobody vouched for)."""
    address = _address(hop) if len(hop) <= _LONGEST_HOP else None
    return None if address is None else _widened(address, 32 if address.version == 4 else 64)


_LONGEST_HOP = 100  # characters of a hop that can be an address (with a port, a zone, quotes)


def _widened(address: _Address, bits: int) -> str:
    """An address as a key: itself, or its network of ``bits`` (an IPv6 client's /64)."""
    if bits == address.max_prefixlen:
        return address.compressed
    return ipaddress.ip_network((address, bits), strict=False).with_prefixlen


def _trusted(address: _Address, networks: tuple[_Network, ...]) -> bool:
    return any(address in network for network in networks)


@functools.lru_cache(maxsize=4096)
def _address(text: str) -> _Address | None:
    """The address in one hop, or None when it is not one (never a guess).

    Memoised (bounded): the same few peers and proxies ask on every request, and parsing
    an address was a fifth of the middleware's own time.
    """
    value = text.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]  # RFC 7239 quoting
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :] if end > 0 else "?"
        if rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:])):
            return None
        value = value[1:end]
    elif value.count(":") == 1:
        value, port = value.split(":")
        if not _PORT.fullmatch(port):
            return None
    value = value.split("%", 1)[0]  # an IPv6 zone names the proxy's interface, not a client
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _list_hops(lines: list[str]) -> Iterator[str]:
    """X-Forwarded-For / X-Real-IP items, right to left."""
    return reversed(",".join(lines).split(",")) if lines else iter(())


def _forwarded_hops(lines: list[str]) -> Iterator[str]:
    """The ``for=`` of each RFC 7239 element, right to left ("" when an element has none)."""
    for element in reversed(_split(",".join(lines), ",")):
        found = ""
        for pair in _split(element, ";"):
            name, _, value = pair.partition("=")
            if name.strip().lower() == "for":
                found = value
                break
        yield found


def _split(text: str, separator: str) -> list[str]:
    """Split on ``separator`` outside quoted strings (which may hold it, escaped or not)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


KEY_MAKERS.append(client_ip)
