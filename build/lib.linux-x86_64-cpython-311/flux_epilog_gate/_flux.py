"""Make flux-core's Python bindings importable.

flux-core installs its bindings outside any virtual environment, under
``pkg-config --variable=fluxlibdir flux-core``/pythonX.Y.  The build records
that directory; ``FLUX_EPILOG_GATE_FLUX_PYTHONPATH`` overrides it.
"""

import os
import sys


def _recorded():
    try:
        from ._buildinfo import FLUX_PYTHONPATH
    except ImportError:
        return None
    return FLUX_PYTHONPATH


def ensure_flux_bindings():
    """Put flux-core's bindings on sys.path if ``import flux`` would fail."""
    try:
        import flux  # noqa: F401

        return
    except ImportError:
        pass
    path = os.environ.get("FLUX_EPILOG_GATE_FLUX_PYTHONPATH") or _recorded()
    if path and path not in sys.path:
        sys.path.append(path)
