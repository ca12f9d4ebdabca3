"""Make the flux-core Python bindings chosen at build time importable.

The build (setup.py) chose either flux-core's own bindings, installed
outside any virtual environment under ``pkg-config --variable=fluxlibdir
flux-core``/pythonX.Y, or flux-python, installed as a dependency in the
environment itself.  ``FLUX_EPILOG_GATE_FLUX_PYTHONPATH`` overrides the
directory of flux-core's own bindings.
"""

import os
import sys


def _buildinfo():
    try:
        from . import _buildinfo
    except ImportError:
        return None
    return _buildinfo


def _foreign_flux_dirs(libdir):
    """sys.path entries holding flux-core's own bindings for another Python
    (``flux env`` and ``flux python`` put them on PYTHONPATH): they would
    shadow flux-python with modules this Python cannot load."""
    mine = os.path.join(libdir, f"python{sys.version_info[0]}.{sys.version_info[1]}")
    return [
        p
        for p in sys.path
        if p
        and os.path.dirname(os.path.normpath(p)) == os.path.normpath(libdir)
        and os.path.basename(os.path.normpath(p)).startswith("python")
        and os.path.normpath(p) != os.path.normpath(mine)
    ]


def ensure_flux_bindings():
    """Make ``import flux`` find the bindings the package was built for."""
    info = _buildinfo()
    if info is not None and getattr(info, "BINDINGS", None) == "flux-python":
        for path in _foreign_flux_dirs(info.FLUX_LIBDIR):
            sys.path.remove(path)
        return
    try:
        import flux  # noqa: F401

        return
    except ImportError:
        pass
    path = os.environ.get("FLUX_EPILOG_GATE_FLUX_PYTHONPATH") or (
        info and info.FLUX_PYTHONPATH
    )
    if path and path not in sys.path:
        sys.path.append(path)
