"""One shutdown per instance, however often the gate changed hands.

``dws.so`` loaded first drives the gate, hands it to ``epilog-gate.so``
at each load of it and takes it back at each removal.  The instance's
shutdown is then followed by the driver only: a plugin that handed the
gate over does not also keep holds, finish them or signal the broker,
once for each time it drove it.
"""

import os
import subprocess
import sys

import pytest

from flux_epilog_gate.testing import flux_command

#: A job held in CLEANUP by hold ``bb``, the hold active when the script
#: ends (and the instance shuts down with it).
HELD = """
id=$(flux submit --urgency=0 true)
flux-epilog-gate hold -q $id bb
flux cancel $id
flux job wait-event -t 30 $id epilog-start >/dev/null
"""


def _run(script):
    env = dict(os.environ)
    env.pop("FLUX_DISABLE_JOB_CLEANUP", None)
    env.pop("FLUX_URI", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    return subprocess.run(
        [flux_command(), "start", "sh", "-ec", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "handovers,driver", [(1, "epilog-gate"), (3, "epilog-gate"), (3, "dws")]
)
@pytest.mark.parametrize("action", ["keep", "finish"])
def test_the_shutdown_is_run_once(plugin, dws_so, handovers, driver, action):
    load = f"flux jobtap load {plugin} shutdown-timeout=1s shutdown-action={action}"
    script = f"flux jobtap load {dws_so}\n{load}\n{HELD}"
    # dws.so hands the gate over at each load of epilog-gate.so after
    # the first, and takes it back at each removal.
    script += f"flux jobtap remove epilog-gate.so\n{load}\n" * (handovers - 1)
    if driver == "dws":
        script += "flux jobtap remove epilog-gate.so\n"
    proc = _run(script)
    lines = proc.stderr.splitlines()
    expired = [line for line in lines if "shutdown-timeout (1s) expired" in line]
    assert len(expired) == 1, proc.stderr
    assert f"{driver}: " in expired[0], proc.stderr
    signalled = [line for line in lines if "SIGTERM" in line]
    assert len(signalled) == (1 if action == "keep" else 0), proc.stderr
