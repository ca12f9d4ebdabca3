"""Fixtures of the unit tests of the gate logic (no broker)."""

import pytest

from flux_epilog_gate.gate import Gate


@pytest.fixture
def gate(port):
    """The gate logic driving a FakePort (``port``), default configuration.

    Here ``gate`` is the logic itself; in the tests above this folder it
    is a client of a real instance's gate."""
    return Gate(port)
