"""flux-epilog-gate: hold a Flux job's clean until every named cleanup
action (epilog) has finished.

The plugin (``epilog-gate.so``) runs inside the job-manager; this package
also holds its Python client, :class:`EpilogGate`, and the
``flux-epilog-gate`` command.
"""

from ._flux import ensure_flux_bindings

ensure_flux_bindings()

from .client import EpilogGate, NoAnswerError  # noqa: E402
from .paths import plugin_path  # noqa: E402
from .version import __version__  # noqa: E402

__all__ = ["EpilogGate", "NoAnswerError", "plugin_path", "__version__"]
