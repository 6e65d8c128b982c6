"""A pytest plugin for benchmarks/mutation_check.py: end a mutation's run at the first test that fails by an
assertion. A mutation counts as caught as soon as one test does, so the rest of its tests would only cost time;
a crash (any other exception) does not end the run, since it does not count as a catch."""

from __future__ import annotations

# What a failure caught by an assertion looks like in pytest's report: an AssertionError from the test, or
# pytest's own "DID NOT RAISE" / "DID NOT WARN" where a test expects an error or a warning.
ASSERTION_MESSAGES = ("AssertionError", "assert ", "Failed: DID NOT RAISE", "Failed: DID NOT WARN")

_session = None


def pytest_sessionstart(session) -> None:
    global _session
    _session = session


def pytest_runtest_logreport(report) -> None:
    crash = getattr(report.longrepr, "reprcrash", None)
    if report.failed and crash is not None and crash.message.startswith(ASSERTION_MESSAGES) and _session is not None:
        _session.shouldstop = "a test failed by an assertion: the mutation is caught"
