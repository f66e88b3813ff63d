"""A pytest plugin (loaded by ``tests/conftest.py``): the backstop that ends a test pytest-timeout
cannot interrupt.

pytest-timeout fails a test by raising from SIGALRM's handler, which runs only when the main thread
returns to Python: a test blocked inside C (a Ray or gloo call waiting on a peer that is gone) would
hang the whole run. Wherever pytest-timeout sets a test's timer (its ``pytest_timeout_set_timer``
hook, with the limit it resolved from the test's mark, ``--timeout``, ``PYTEST_TIMEOUT`` or the
ini), the backstop arms faulthandler's own thread ``backstop_grace_s`` later: it dumps every
thread's stack to stderr and ends the process. Under ``pytest -n`` the controller reports that the
worker crashed in this test and the other workers finish the run (``make test`` passes
``--max-worker-restart 0``: a replacement worker left this suite's scheduler waiting for good)."""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator
from typing import IO, Any

import pytest

GRACE_INI = "backstop_grace_s"
STDERR = pytest.StashKey[IO[str]]()
"""The process's stderr as it was before pytest captured file descriptor 2 (the stacks must reach
the terminal, not a capture file that dies with the process)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(GRACE_INI, "seconds past a test's timeout before its process is ended", default="120")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[STDERR] = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")


@pytest.hookimpl(hookwrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Iterator[None]:
    grace_s = float(item.config.getini(GRACE_INI))
    faulthandler.dump_traceback_later(settings.timeout + grace_s, exit=True, file=item.config.stash[STDERR])
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> Iterator[None]:
    faulthandler.cancel_dump_traceback_later()
    yield
