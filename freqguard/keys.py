"""Storage keys, built in one place and cluster-safe by construction.

Layout::

    <prefix>:{<partition>}:<policy>:<key id>@<dimensions>[:<digest>]

* ``{<partition>}`` is the Redis Cluster hash tag: the value of the policy's partition
  dimension (the first dimension every rule shares, e.g. the recipient), so every key of one
  hit lands on one slot. A value made only of ``A-Z a-z 0-9 _ . @ + -`` and at most 64
  characters long is kept verbatim (readable in ``redis-cli``); any other value (``{``, ``}``,
  ``:``, spaces, non-ASCII, empty, long) becomes ``=`` plus a digest. ``=`` is not a safe
  character, so a digest never equals a verbatim value. A rule keyed by no dimension uses
  ``*<policy>``, which no value can produce either.
* ``<key id>`` names the state (a rule, or a sliding log shared by several rules) and
  ``<dimensions>`` the dimension names it is keyed by, so two dimensions holding the same value
  never share a key.
* ``<digest>`` covers every other dimension value (message content among them): values are
  never stored verbatim outside the hash tag, and keys stay short whatever their length.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from hashlib import blake2b as _blake2b

from freqguard.errors import ConfigError
from freqguard.rules import check_name

__all__ = ["KeyLayout", "digest", "partition_token", "raw_digest", "value_text"]

_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.@+\-]{1,64}")
_DIGEST_BYTES = 8  # 64 bits, 16 hex characters; collisions only matter inside one partition


def value_text(policy: str, dimension: str, value: object) -> str:
    """The text form of one dimension value; only ``str`` and ``int`` are accepted.

    Raises:
        ConfigError: any other type, or an int longer than Python turns into text
            (``sys.get_int_max_str_digits()``, 4300 digits by default).
    """
    if type(value) is str:  # the hot case first
        return value
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return str(value)
        except ValueError:  # the digit limit; never repr() the value in the message
            raise ConfigError(
                f"dimension {dimension!r} of policy {policy!r} must be an int of at most "
                f"{sys.get_int_max_str_digits()} digits (sys.get_int_max_str_digits()), "
                f"got one of about {value.bit_length() * 30103 // 100000} digits"
            ) from None
    raise ConfigError(
        f"dimension {dimension!r} of policy {policy!r} must be a str or an int, got {value!r}"
    )


def raw_digest(*texts: str) -> bytes:
    """A short digest of one or several texts (length-prefixed: unambiguous)."""
    if len(texts) == 1:
        data = texts[0].encode("utf-8", "surrogatepass")
    else:
        parts = [t.encode("utf-8", "surrogatepass") for t in texts]
        data = b"".join(len(p).to_bytes(4, "big") + p for p in parts)
    return _blake2b(data, digest_size=_DIGEST_BYTES).digest()


def digest(*texts: str) -> str:
    """:func:`raw_digest` as key-safe hex."""
    return raw_digest(*texts).hex()


def partition_token(text: str) -> str:
    """The hash-tag form of a partition value: verbatim when safe, else ``=`` + digest."""
    if _SAFE_VALUE.fullmatch(text):
        return text
    return "=" + digest(text)


class KeyLayout:
    """Builds the key of one piece of state from a hit's context.

    Args:
        prefix: the key prefix (``fg``).
        policy: the policy name.
        key_id: what the state is (a rule id, or ``log`` for a shared sliding log).
        partition: the hash-tag dimension, or ``None`` for a global key.
        dimensions: every dimension the key is keyed by, partition included, in rule order.
    """

    __slots__ = (
        "_extra",
        "_global_head",
        "_global_record",
        "_head",
        "_mid",
        "_partition",
        "_policy_tail",
        "key_id",
        "tag",
    )

    def __init__(
        self,
        prefix: str,
        policy: str,
        key_id: str,
        partition: str | None,
        dimensions: tuple[str, ...],
    ) -> None:
        check_name("key prefix", prefix)
        self.key_id = f"{key_id}@{','.join(dimensions)}"
        self._partition = partition
        self._extra = tuple(d for d in dimensions if d != partition)
        self._head = f"{prefix}:{{"
        self._policy_tail = f"}}:{policy}"
        self._mid = f"{self._policy_tail}:{self.key_id}"
        self._global_record = f"{prefix}:{{*{policy}}}:{policy}"
        self._global_head = f"{self._global_record}:{self.key_id}"
        # In Redis, every state of one partition and policy is a field of one record key
        # (see freqguard/lua/policy.lua); a field is this 2-byte tag plus the raw digest.
        self.tag = _blake2b(self.key_id.encode(), digest_size=2).digest()

    def _digest(self, texts: Mapping[str, str]) -> bytes:
        """The raw digest of the values of the dimensions other than the partition."""
        extra = self._extra
        if len(extra) == 1:  # the usual case (content): no list
            return raw_digest(texts[extra[0]])
        return raw_digest(*[texts[d] for d in extra])

    def build(self, texts: Mapping[str, str]) -> str:
        """The key for a context whose values were already turned into text."""
        if self._partition is None:
            key = self._global_head
        else:
            key = self._head + partition_token(texts[self._partition]) + self._mid
        if not self._extra:
            return key
        return key + ":" + self._digest(texts).hex()

    def record(self, texts: Mapping[str, str]) -> str:
        """The Redis record the key lives in: the key up to its policy,
        ``fg:{18829340001}:sms``."""
        if self._partition is None:
            return self._global_record
        return self._head + partition_token(texts[self._partition]) + self._policy_tail

    def field(self, texts: Mapping[str, str]) -> bytes:
        """The key's field in its Redis record: the tag, plus the raw digest if any."""
        if not self._extra:
            return self.tag
        return self.tag + self._digest(texts)
