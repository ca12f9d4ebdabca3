"""Where the installed plugin is."""

import os

PLUGIN = "epilog-gate.so"


def plugin_path():
    """Absolute path of the installed ``epilog-gate.so``."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobtap", PLUGIN)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} does not exist: flux-epilog-gate is not built "
            "(install it with pip)"
        )
    return path
