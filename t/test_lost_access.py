"""Only the instance owner may watch lost holds: a guest's ``watch`` with
``lost`` is refused (EPERM)."""

import errno

import pytest
from guests import GUEST_A, guest


def test_a_guest_may_not_watch_lost_holds(instance):
    gate = guest(instance, GUEST_A)
    future = gate.watch_async(lost=True)
    with pytest.raises(OSError) as raised:
        future.get()
    assert raised.value.errno == errno.EPERM
    assert "only the instance owner may watch lost holds" in str(raised.value)
