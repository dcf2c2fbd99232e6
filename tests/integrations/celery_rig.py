"""What the Celery tests share: an app on Celery's in-memory broker, run eagerly
(``task_always_eager``), its results not stored (``test_celery.py``,
``test_celery_leases.py``; import the fixture by name), and a task run as a worker's pool
runs it (``test_celery_messages.py`` too)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, Task


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("capped", broker="memory://", backend="cache+memory://", set_as_current=False)
    app.conf.task_always_eager = True
    app.conf.task_store_eager_result = False
    yield app
    app.close()


def run_as_worker(task: Task, task_id: str, retries: int = 0, **kwargs: Any) -> Any:
    """``task`` run as a worker's pool runs it: a request that is not eager, of that id and
    number of retries."""
    task.push_request(
        id=task_id, retries=retries, is_eager=False, called_directly=False, kwargs=kwargs, args=()
    )
    try:
        return task.run(**kwargs)
    finally:
        task.pop_request()
