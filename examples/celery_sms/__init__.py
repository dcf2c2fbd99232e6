"""An SMS sender on Celery: every message capped per recipient, deferred to its turn.

    FREQGUARD_URL=redis://127.0.0.1:6379/0 CELERY_BROKER_URL=amqp://guest:guest@127.0.0.1:5672// \\
        celery -A examples.celery_sms worker --pool prefork -c 4

    >>> from examples.celery_sms import send_sms
    >>> send_sms.delay(recipient="+4915112345678", content="Your code is 1234",
    ...                tz="Europe/Berlin", priority="transactional")

The policy (``examples.celery_sms.policy``): per recipient 15 a minute and 50 a day, the same
text twice in 59 seconds, no marketing between 21:00 and 08:00 in the recipient's zone, and
the vendor's 200 a second shared by every worker (GCRA, so they are spread evenly). A message
over a cap is deferred to the moment it frees (the morning, for quiet hours) without using
the task's retries; a vendor failure refunds the message's hit and retries it.

With ``FREQGUARD_URL`` every worker process shares the caps through Redis (or Redis
Cluster); without it each process caps on its own, in memory: for a first try only.
"""

from __future__ import annotations

import logging
import os

from celery import Celery, Task

from examples.celery_sms.policy import SMS
from freqguard import Guard, MemoryBackend, backend_from_url
from freqguard.integrations.celery import capped_task

__all__ = ["SMS", "VendorError", "app", "deliver", "guard", "send_sms"]

log = logging.getLogger(__name__)

app = Celery("celery_sms", broker=os.environ.get("CELERY_BROKER_URL"))
_url = os.environ.get("FREQGUARD_URL")
guard = Guard(backend_from_url(_url) if _url else MemoryBackend(), [SMS])


class VendorError(Exception):
    """The SMS vendor refused or timed out."""


def deliver(recipient: str, content: str) -> str:
    """The vendor call (here: logged). Returns the vendor's message id."""
    log.info("SMS to %s: %s", recipient, content)
    return f"msg-{abs(hash((recipient, content))) % 10**8:08d}"


@capped_task(app, SMS, guard=guard, bind=True, name="sms.send", max_retries=5, acks_late=True)
def send_sms(
    task: Task, recipient: str, content: str, tz: str = "UTC", priority: str = "marketing"
) -> str:
    """Send one SMS; over a cap it is deferred, and a vendor failure is retried (its hit
    refunded first, so the retry counts once)."""
    try:
        return deliver(recipient, content)
    except VendorError as exc:
        raise task.retry(exc=exc, countdown=30) from exc
