"""Where the installed plugin is."""

import os

PLUGIN = "epilog-gate.so"
#: The plugins ``flux-epilog-gate path [NAME]`` knows: name -> (directory, file).
PLUGINS = {"epilog-gate": ("jobtap", PLUGIN), "dws": ("dws", "dws.so")}


def plugin_path(name="epilog-gate"):
    """Absolute path of the installed plugin ``name`` (``epilog-gate`` or
    ``dws``)."""
    folder, filename = PLUGINS[name]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), folder, filename)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} does not exist: flux-epilog-gate is not built "
            "(install it with pip)"
        )
    return path
