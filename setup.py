"""Build and install flux-epilog-gate.

Besides the pure-Python package this builds ``epilog-gate.so`` (see
flux_epilog_gate/plugin/cbuild.py and flux_epilog_gate/jobtap/build.py) against
``pkg-config flux-core`` and chooses flux-core's Python bindings:
flux-core's own when they import in the Python being installed into,
else a dependency on the flux-python release of the installed
flux-core.  An install that cannot work stops here, before anything is
built, with a message that says what to do.
"""

import os
import sys

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "flux_epilog_gate", "jobtap"))
sys.path.insert(0, os.path.join(HERE, "flux_epilog_gate", "plugin"))
import build as plugin_build  # noqa: E402
import cbuild as gate_build  # noqa: E402

del sys.path[:2]

PTH = "flux_epilog_gate-flux.pth"
BUILDINFO = '''"""Written by setup.py at build time."""

BINDINGS = {kind!r}
FLUX_PYTHONPATH = {path!r}
FLUX_LIBDIR = {libdir!r}
'''
# Runtime dependencies besides the bindings; flux-python needs ply but does
# not declare it (flux-core's own bindings need it too).  setuptools: the
# runtime's build helper (flux_epilog_gate.jobtap.build) compiles plugins
# with cffi, which needs it, and a Python 3.12 venv has none.
DEPENDENCIES = ["cffi>=1.15", "pyyaml", "ply", "setuptools"]


def preflight():
    try:
        return plugin_build.preflight()
    except plugin_build.BuildError as exc:
        sys.exit(f"error: flux-epilog-gate cannot be installed here: {exc}")


BINDINGS = preflight()


class BuildPlugin(Command):
    """Compile epilog-gate.so and dws.so into the build tree."""

    description = "compile the epilog-gate.so and dws.so jobtap plugins"
    user_options = []

    def initialize_options(self):
        self.build_lib = None

    def finalize_options(self):
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def run(self):
        outdir = os.path.join(self.build_lib, "flux_epilog_gate", "jobtap")
        gate_build.compile_gate(outdir, BINDINGS)
        gate_build.compile_dws(
            os.path.join(self.build_lib, "flux_epilog_gate", "dws"), BINDINGS
        )
        info = os.path.join(self.build_lib, "flux_epilog_gate", "_buildinfo.py")
        with open(info, "w") as f:
            f.write(
                BUILDINFO.format(
                    kind=BINDINGS.kind,
                    path=BINDINGS.path,
                    libdir=plugin_build.flux_libdir(),
                )
            )
        # A .pth file at the top of site-packages makes flux-core's own
        # bindings importable in the environment, for the CLI and for
        # services (flux-python is installed there already).
        pth = os.path.join(self.build_lib, PTH)
        if BINDINGS.path:
            with open(pth, "w") as f:
                f.write(BINDINGS.path + "\n")
        elif os.path.exists(pth):
            os.unlink(pth)


class BuildPy(build_py):
    def run(self):
        super().run()
        self.run_command("build_plugin")


class BinaryDistribution(Distribution):
    """The wheel carries a compiled plugin: it is platform specific."""

    def has_ext_modules(self):
        return True


setup(
    install_requires=DEPENDENCIES
    + ([BINDINGS.requirement] if BINDINGS.requirement else []),
    cmdclass={"build_py": BuildPy, "build_plugin": BuildPlugin},
    distclass=BinaryDistribution,
)
