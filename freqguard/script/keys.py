"""Storage keys, built in one place and cluster-safe by construction.

A policy's keys are laid out here once (:func:`policy_layout`): which dimension partitions
its rules into parts, which rules share one piece of state, and the key of each state. The
rest of freqguard only asks for that layout.

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

In Redis, every key of one partition value and policy is a field of one record (the key up
to its policy, :meth:`KeyLayout.record`), named by a 3-byte *field tag* of its key id plus
the digest (:meth:`KeyLayout.field`). With bins (``RedisBackend(bins=N)``), records
of many partition values share one hash, ``<prefix>:{#<n>}:<policy>`` (:meth:`KeyLayout.bin`),
``n`` taken from the partition value's 8-byte digest, which names its record there.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from hashlib import blake2b as _blake2b
from typing import NamedTuple

from freqguard.errors import ConfigError, shown
from freqguard.policy import Policy
from freqguard.rules import Rule, Strategy, check_name
from freqguard.script.contract import OLD_TAG_BYTES, WIDE_TAG_BYTES

__all__ = [
    "POLICY_KEYS",
    "KeyLayout",
    "StateLayout",
    "context_digest",
    "digest",
    "partition_token",
    "policy_key",
    "policy_layout",
    "raw_digest",
    "value_text",
]

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
        return str(value)  # a subclass's (a request's Address) as a plain str
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return int.__repr__(value)  # an int subclass's own __str__ is not asked
        except ValueError:  # the digit limit; never repr() the value in the message
            raise ConfigError(
                f"dimension {dimension!r} of policy {policy!r} must be an int of at most "
                f"{sys.get_int_max_str_digits()} digits (sys.get_int_max_str_digits()), "
                f"got one of about {value.bit_length() * 30103 // 100000} digits",
                argument=f"context.{dimension}",
            ) from None
    raise ConfigError(
        f"dimension {dimension!r} of policy {policy!r} must be a str or an int, got {shown(value)}",
        argument=f"context.{dimension}",
    )


def raw_digest(*texts: str, size: int = _DIGEST_BYTES) -> bytes:
    """A short digest (``size`` bytes) of one or several texts (length-prefixed:
    unambiguous)."""
    if len(texts) == 1:
        data = texts[0].encode("utf-8", "surrogatepass")
    else:
        parts = [t.encode("utf-8", "surrogatepass") for t in texts]
        data = b"".join(len(p).to_bytes(4, "big") + p for p in parts)
    return _blake2b(data, digest_size=size).digest()


def digest(*texts: str) -> str:
    """:func:`raw_digest` as key-safe hex."""
    return raw_digest(*texts).hex()


#: What a policy keeps beside its records, in keys of the policy's one slot (``{*<policy>}``):
#: the clients' bins setting (``bins``), the service's decisions per minute of an hour
#: (``stats:<hour>``) and the keys it denied most in a minute (``top:<minute>``).
POLICY_KEYS = ("bins", "stats", "top")


def policy_key(prefix: str, policy: str, what: str, number: int | None = None) -> str:
    """A key a policy keeps beside its records (:data:`POLICY_KEYS`):
    ``<prefix>:{*<policy>}:<policy>:<what>[:<number>]``, in the slot of its one record."""
    assert what in POLICY_KEYS
    key = f"{prefix}:{{*{policy}}}:{policy}:{what}"
    return key if number is None else f"{key}:{number}"


def context_digest(context: Mapping[str, object], dimensions: Sequence[str]) -> str:
    """A context's digest by ``dimensions`` (the service's keys denied most): never its
    values, which may be a message's content."""
    return digest(*[str(context[d]) for d in dimensions if d in context])


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
        bins: how many bins the records of a partitioned key share in Redis (0: none,
            a record is a hash of its own).
    """

    __slots__ = (
        "_bin_head",
        "_extra",
        "_global_head",
        "_global_record",
        "_head",
        "_mid",
        "_partition",
        "_policy_tail",
        "bins",
        "field_tag",
        "key_id",
        "layout_key",
        "old_tag",
        "sent_tag",
    )

    def __init__(
        self,
        prefix: str,
        policy: str,
        key_id: str,
        partition: str | None,
        dimensions: tuple[str, ...],
        bins: int = 0,
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
        # where the store records how its clients keep this policy's records (bins or
        # not, how many): a key no state's can be (no '@')
        self.layout_key = policy_key(prefix, policy, "bins")
        # a global key's record is one: never in a bin
        self.bins = bins if partition is not None else 0
        self._bin_head = (f"{prefix}:{{#", f"}}:{policy}")
        # In Redis, every state of one partition and policy is a field of one record key
        # (see freqguard/script/lua/records.lua); a field is this field tag plus the raw
        # digest. Not the cluster hash tag: that is the {partition} of the key. The tag is
        # 3 bytes: the OLD_TAG_BYTES that named the state before layout 6 (the Lua reads a
        # record's states there too until it has moved them), and one more, so that a rule
        # a deploy adds reads a removed one's state 1 time in 2^24, not 2^16 (design note 79).
        key = self.key_id.encode()
        self.field_tag = (
            _blake2b(key, digest_size=OLD_TAG_BYTES).digest()
            + _blake2b(key, digest_size=1).digest()
        )
        # the 6-byte tag freqguard 0.3.0 and before named the state by when another state
        # of its policy shared its first OLD_TAG_BYTES (b"": none does; set by
        # _check_field_tags), and what a call sends as its field: that old tag, then the
        # field tag (the Lua reads the old name where the new one is absent, see
        # freqguard/script/lua/records.lua split_names)
        self.old_tag = b""
        self.sent_tag = self.field_tag

    @property
    def partition(self) -> str | None:
        """The dimension whose value is the key's hash tag (None: a global key)."""
        return self._partition

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

    def bin(self, texts: Mapping[str, str]) -> tuple[bytes, bytes]:
        """The bin the key's record lives in (``bins`` > 0), and the record's 8-byte id
        there (the field it is): ``fg:{#4711}:sms`` and the partition value's digest."""
        assert self._partition is not None
        assert self.bins > 0
        rid = raw_digest(texts[self._partition])
        head, tail = self._bin_head
        key = f"{head}{int.from_bytes(rid, 'big') % self.bins}{tail}".encode()
        return key, rid

    def field(self, texts: Mapping[str, str]) -> bytes:
        """The key's field in its Redis record as a call sends it: the sent tag (the field
        tag, after the old tag if any), plus the raw digest if any."""
        if not self._extra:
            return self.sent_tag
        return self.sent_tag + self._digest(texts)


class StateLayout(NamedTuple):
    """One piece of state of a policy: how its key is built and whose state it is."""

    key: KeyLayout
    rules: tuple[int, ...]  # the policy's indices of the rules that keep their state in it


def policy_layout(
    policy: Policy, prefix: str, bins: int = 0
) -> tuple[tuple[StateLayout, ...], ...]:
    """Every piece of state a policy keeps, one tuple per part, each in rule order
    (``bins``: see :class:`KeyLayout`).

    * The partition (the hash tag, so the part) of a rule is a dimension every rule of the
      policy shares, else the rule's first dimension in policy order (not in its own ``by``
      order: rules keyed by the same dimensions must share a part, since they may share a key);
      rules with the same partition form one part, decided by one script call.
    * Every non-shadow sliding-log rule with the same dimensions shares one log (key id
      ``log``), but for one that applies to some priorities only; any other rule keeps its
      own state (key id: the rule's id).

    Raises:
        ConfigError: two states whose field tags collide (see :func:`_check_field_tags`).
    """
    dimensions = policy.dimensions
    shared = [d for d in dimensions if all(d in r.by for r in policy.rules)]
    parts: dict[str | None, list[int]] = {}
    for index, rule in enumerate(policy.rules):
        own = [d for d in dimensions if d in rule.by]
        partition = shared[0] if shared else (own[0] if own else None)
        parts.setdefault(partition, []).append(index)
    layout = tuple(
        _part_layout(policy, prefix, partition, indices, bins)
        for partition, indices in parts.items()
    )
    _check_field_tags(policy.name, layout)
    return layout


def _part_layout(
    policy: Policy, prefix: str, partition: str | None, indices: list[int], bins: int
) -> tuple[StateLayout, ...]:
    order = {d: i for i, d in enumerate(policy.dimensions)}
    states: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for index in indices:
        rule = policy.rules[index]
        dims = tuple(sorted(rule.by, key=order.__getitem__))
        states.setdefault((_key_id(rule), dims), []).append(index)
    return tuple(
        StateLayout(KeyLayout(prefix, policy.name, key_id, partition, dims, bins), tuple(members))
        for (key_id, dims), members in states.items()
    )


def _key_id(rule: Rule) -> str:
    """What names a rule's state: ``log`` for a log shared with the other non-shadow
    sliding-log rules of its dimensions, else the rule's own id; a named rule's, with
    what its state is (its strategy, or a calendar's count), since its name stays when
    its strategy changes and another strategy's state would be misread."""
    shared_log = rule.strategy is Strategy.SLIDING_LOG and not rule.shadow
    # a rule for some priorities only (only=) counts only their hits: a log of its own
    if shared_log and rule.only is None:
        return "log"
    if rule.name is None:  # a derived id already says it
        return rule.id
    return f"{rule.id}/{'cal' if rule.calendar else rule.strategy.short}"


def _check_field_tags(policy: str, layout: tuple[tuple[StateLayout, ...], ...]) -> None:
    """In Redis, the states of one partition value share a record, each in a field named by
    its 3-byte field tag, a function of its key id alone: a deploy that adds, removes or
    changes other rules never renames a state (design note 94). Two states whose tags are
    alike (1 in 16.7 million a pair) are refused. Up to freqguard 0.3.0, states whose first
    OLD_TAG_BYTES collided were named by 6-byte tags of their key ids instead: such a state
    is sent with that old tag first (``old_tag``), which the Lua reads where the field tag
    is absent, and moves."""
    states = [state.key for part in layout for state in part]
    by_tag: dict[bytes, list[KeyLayout]] = {}
    for key in states:
        by_tag.setdefault(key.field_tag[:OLD_TAG_BYTES], []).append(key)
    for keys in by_tag.values():
        if len({key.key_id for key in keys}) > 1:
            for key in keys:
                key.old_tag = _blake2b(key.key_id.encode(), digest_size=WIDE_TAG_BYTES).digest()
                key.sent_tag = key.old_tag + key.field_tag
    seen: dict[bytes, str] = {}
    for key in states:
        other = seen.setdefault(key.field_tag, key.key_id)
        if other != key.key_id:
            raise ConfigError(
                f"policy {policy!r}: the states {other!r} and {key.key_id!r} would share a "
                "Redis field (their tags collide); rename one of their rules (name=...)"
            )
