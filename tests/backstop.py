"""A pytest plugin (loaded by ``tests/conftest.py``): the backstop that ends a test pytest-timeout
cannot interrupt.

pytest-timeout fails a test by raising from SIGALRM's handler, which runs only when the main thread
returns to Python: a test blocked inside C (a Ray or gloo call waiting on a peer that is gone) would
hang the whole run. ``backstop_grace_s`` after its timeout, faulthandler's own thread dumps every
thread's stack to stderr and ends the process; under ``pytest -n`` the controller reports that the
worker crashed in this test and carries on with a new worker."""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator

import pytest

GRACE_INI = "backstop_grace_s"
_stderr: list = []
"""The process's stderr as it was before pytest captured file descriptor 2 (the stacks must reach
the terminal, not a capture file that dies with the process)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(GRACE_INI, "seconds past a test's timeout before its process is ended", default="120")


def pytest_configure(config: pytest.Config) -> None:
    _stderr.append(os.fdopen(os.dup(sys.__stderr__.fileno()), "w"))


def _timeout_s(item: pytest.Item) -> float:
    """The test's pytest-timeout limit: its ``timeout`` mark, else the ini's ``timeout`` (0: none)."""
    mark = item.get_closest_marker("timeout")
    if mark is not None and mark.args:
        return float(mark.args[0])
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    limit_s = _timeout_s(item)
    if limit_s > 0:
        grace_s = float(item.config.getini(GRACE_INI))
        faulthandler.dump_traceback_later(limit_s + grace_s, exit=True, file=_stderr[0])
    try:
        yield
    finally:
        if limit_s > 0:
            faulthandler.cancel_dump_traceback_later()
