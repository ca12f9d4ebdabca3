"""Build and install flux-epilog-gate.

Besides the pure-Python package this builds ``epilog-gate.so`` (see
flux_epilog_gate/jobtap/build.py) against ``pkg-config flux-core`` and
records where flux-core's Python bindings live.
"""

import os
import sys

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "flux_epilog_gate", "jobtap"))
import build as plugin_build  # noqa: E402

sys.path.pop(0)

PTH = "flux_epilog_gate-flux.pth"
BUILDINFO = '''"""Written by setup.py at build time."""

FLUX_PYTHONPATH = {flux_pythonpath!r}
'''


class BuildPlugin(Command):
    """Compile epilog-gate.so into the build tree."""

    description = "compile the epilog-gate.so jobtap plugin"
    user_options = []

    def initialize_options(self):
        self.build_lib = None

    def finalize_options(self):
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def run(self):
        outdir = os.path.join(self.build_lib, "flux_epilog_gate", "jobtap")
        plugin_build.compile_plugin(outdir)
        fluxpath = plugin_build.flux_pythonpath()
        info = os.path.join(self.build_lib, "flux_epilog_gate", "_buildinfo.py")
        with open(info, "w") as f:
            f.write(BUILDINFO.format(flux_pythonpath=fluxpath))
        # A .pth file at the top of site-packages makes flux-core's bindings
        # importable in the environment, for the CLI and for services.
        with open(os.path.join(self.build_lib, PTH), "w") as f:
            f.write(fluxpath + "\n")


class BuildPy(build_py):
    def run(self):
        super().run()
        self.run_command("build_plugin")


class BinaryDistribution(Distribution):
    """The wheel carries a compiled plugin: it is platform specific."""

    def has_ext_modules(self):
        return True


setup(
    cmdclass={"build_py": BuildPy, "build_plugin": BuildPlugin},
    distclass=BinaryDistribution,
)
