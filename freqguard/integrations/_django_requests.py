"""What one Django request has decided, and how it is read and answered: its notes
(``request.freqguard``, ``request.limited``), the request as key functions see it, a
refusal as a response, the rate-limit headers of every decision it met, and what is given
back when a later cap refuses it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from freqguard.decision import Decision
from freqguard.errors import BackendUnavailable, ConfigError
from freqguard.guard import AsyncGuard, Guard
from freqguard.headers import combined_headers, merge_into
from freqguard.integrations._decide import Answer, Route
from freqguard.integrations._django_state import State, ViewCap
from freqguard.integrations._request import RequestInfo

__all__ = [
    "RequestNotes",
    "agive_back",
    "give_back",
    "load_user",
    "needs_user",
    "noted",
    "notes_of",
    "request_info",
    "response",
    "taken",
    "with_headers",
]


@dataclass
class RequestNotes:
    """What one request has decided (``request.freqguard``): the decisions, in the order
    they were made (:attr:`decisions`), the one nearest exhaustion (:attr:`decision`), and
    whether any denied it (:attr:`limited`, also ``request.limited``)."""

    decided: set[ViewCap] = field(default_factory=set)
    decisions: list[Decision] = field(default_factory=list)
    middleware: bool = False  # the middleware adds the headers to the response
    first: Answer | None = None  # the first decision's answer: its headers are planned
    # what was taken before a later cap decided: given back if that cap refuses
    taken: list[tuple[Guard | AsyncGuard, Decision]] = field(default_factory=list)
    unfit: bool = False  # a cost past the request's capacity denied it: no retry passes

    def note(self, answer: Answer) -> None:
        """Note an answer's decision (none: refused before a hit, or skipped)."""
        self.unfit = self.unfit or answer.unfit
        if answer.decision is not None:
            if not self.decisions and answer.allowed:  # a refusal's are a problem's too
                self.first = answer
            self.decisions.append(answer.decision)

    @property
    def limited(self) -> bool:
        """Whether a decision denied the request (a ``block=False`` cap's, if it is served)."""
        return any(not decision.allowed for decision in self.decisions)

    @property
    def decision(self) -> Decision | None:
        """The tightest of the request's decisions: a denial first, else the one with the
        least remaining (None: nothing decided it)."""
        if not self.decisions:
            return None
        return min(self.decisions, key=lambda d: (d.allowed, d.remaining))


def notes_of(request: Any) -> RequestNotes:
    """The request's notes (a DRF Request's are its Django request's)."""
    request = getattr(request, "_request", request)
    found: RequestNotes | None = getattr(request, "freqguard", None)
    if found is None:
        found = request.freqguard = RequestNotes()
    return found


def request_info(request: HttpRequest) -> RequestInfo:
    """A Django request as key functions read it (WSGI and ASGI alike: ``request.META``)."""
    meta = request.META

    def read_headers() -> dict[str, list[str]]:
        # the server (or Django's ASGI handler) has joined repeated lines into one value
        return {
            name[5:].replace("_", "-").lower(): [value]
            for name, value in meta.items()
            if name.startswith("HTTP_")
        }

    return RequestInfo(
        request.method or "GET",
        request.path_info,
        read_headers,
        meta.get("REMOTE_ADDR"),
        None,
        request,
    )


def response(answer: Answer) -> HttpResponse:
    """A refusal (400, 429, 503) as a Django response: the problem body and its headers."""
    found = HttpResponse(answer.body, status=answer.status)
    for name, value in answer.headers.items():
        found[name] = value
    return found


def noted(request: Any, cap: ViewCap | None, answer: Answer) -> HttpResponseBase | None:
    """Note an answer on the request (``request.limited`` too, as django-ratelimit sets
    it); the refusal to send, if refused."""
    notes = notes_of(request)
    if cap is not None:
        notes.decided.add(cap)
    notes.note(answer)  # a denial too: the tightest, whose headers the response keeps
    getattr(request, "_request", request).limited = notes.limited
    return None if answer.allowed else response(answer)


def with_headers(state: State, notes: RequestNotes, found: HttpResponseBase) -> HttpResponseBase:
    """``found`` with the rate-limit headers of every policy the request met, naming the
    rule nearest exhaustion."""
    decisions = notes.decisions
    if decisions:
        if len(decisions) == 1 and notes.first is not None:
            headers = notes.first.headers  # the usual case: built from the route's plan
        else:
            headers = combined_headers(decisions, state.settings.headers)
        if found.status_code < 400 or notes.unfit:  # a block=False denial's view answered
            # (not a refusal), or a denial no retry turns: no Retry-After of ours
            headers = {k: v for k, v in headers.items() if k.lower() != "retry-after"}
        # the view's own kept where nearer (a 3xx's Retry-After too)
        merge_into(found.headers, headers, found.status_code)
    return found


def needs_user(route: Route) -> bool:
    return any(getattr(part.key, "needs_user", False) for part in route.keyed)


def load_user(request: Any) -> None:
    """Evaluate the lazy ``request.user`` (a session lookup): off the event loop."""
    user = getattr(request, "user", None)
    if user is not None:
        user.is_authenticated  # noqa: B018 -- evaluated for its side effect, the lookup


def taken(request: Any, guard: Guard | AsyncGuard, answer: Answer) -> None:
    """Note what an admitted hit took, to give back if a cap or a freqguard DRF throttle
    decided later refuses the request (a lease's rate units too: its release, when the
    request is answered, leaves one given back already be)."""
    decision = answer.decision
    if answer.allowed and decision is not None:
        notes_of(request).taken.append((guard, decision))


def give_back(notes: RequestNotes) -> None:
    """A later cap refused the request: what earlier hits took goes back, so that a refused
    request is counted by none (best effort: a store that fails now keeps it, and so does
    a refund a deploy since refuses; a lease still goes back when the request is answered)."""
    while notes.taken:
        guard, decision = notes.taken.pop()
        try:
            if isinstance(guard, AsyncGuard):
                async_to_sync(guard.refund)(decision)
            else:
                guard.refund(decision)
        except (BackendUnavailable, ConfigError):
            pass


async def agive_back(notes: RequestNotes) -> None:
    """:func:`give_back` on an event loop."""
    while notes.taken:
        guard, decision = notes.taken.pop()
        try:
            if isinstance(guard, AsyncGuard):
                await guard.refund(decision)
            else:
                await sync_to_async(guard.refund)(decision)
        except (BackendUnavailable, ConfigError):
            pass
