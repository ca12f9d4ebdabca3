"""What the dws plugin reads from a rabbit job's eventlog when it takes a
job over at a load or a restart (no instance needed)."""

import json

from flux_epilog_gate.dws.eventlog import created_before, held_actions


def log(*entries):
    return "\n".join(
        json.dumps({"timestamp": t, "name": n, "context": c}) for t, n, c in entries
    ).encode()


def test_started_and_unfinished_actions_are_held():
    text = log(
        (1.0, "prolog-start", {"description": "dws-setup"}),
        (2.0, "prolog-finish", {"description": "dws-setup", "status": 0}),
        (3.0, "epilog-start", {"description": "other"}),
        (4.0, "epilog-start", {"description": "dws-epilog"}),
    )
    assert held_actions(text) == {"dws-epilog": 4.0}
    assert held_actions(log((1.0, "prolog-start", {"description": "dws-setup"}))) == {
        "dws-setup": 1.0
    }


def test_damaged_lines_are_skipped():
    text = b'not json\n[1, 2]\n{"name": "epilog-start", "context": 7}\n' + log(
        (5.0, "epilog-start", {"description": "dws-epilog"})
    )
    assert held_actions(text) == {"dws-epilog": 5.0}
    assert held_actions(b"") == {}


def test_a_create_counts_only_if_posted_before_the_load():
    text = log((10.0, "dependency-add", {"description": "dws-create"}))
    assert created_before(text, 11.0)
    assert not created_before(text, 10.0)
    assert not created_before(log((1.0, "dependency-add", {"description": "x"})), 5.0)
    assert not created_before(b"{broken", 5.0)
