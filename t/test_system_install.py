"""`make install-system`: the plugin, `flux epilog-gate` and the man pages
where flux-core finds them by name, staged under DESTDIR for packagers or
installed for real into the machine's flux-core."""

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
from conftest import REPO, skip_unless

from flux_epilog_gate.jobtap import build

PYVER = "%d.%d" % sys.version_info[:2]
FLUX_LIBDIR = build.flux_libdir()
PLUGINDIR = os.path.join(FLUX_LIBDIR, "job-manager", "plugins")
CMDDIR = build.pkg_config("--variable=fluxcmddir")[0]
# Marks the prefixes this file installs into, so that a link left by an
# interrupted run is known as ours.
MARK = "epilog-gate-sysinst"


def make(target, **variables):
    """Run `make TARGET VAR=VALUE...` in the source tree, with this test's
    Python as the environment's interpreter and docutils' host."""
    variables.setdefault("PYTHON", sys.executable)
    variables.setdefault("DOC_PYTHON", sys.executable)
    args = [f"{k}={v}" for k, v in variables.items()]
    return subprocess.run(
        ["make", "-s", "-C", REPO, target, *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def site_plugin(pkglibdir):
    return os.path.join(
        pkglibdir,
        "lib",
        f"python{PYVER}",
        "site-packages",
        "flux_epilog_gate",
        "jobtap",
        "epilog-gate.so",
    )


def interpreter(script):
    """The interpreter a pip-made script runs: on its #! line or, when the
    path is too long for one, on the line that execs it."""
    with open(script) as f:
        head = f.readline() + f.readline()
    found = re.search(r"^'{3}exec' (\S+)", head, re.M) or re.match(r"#!(\S+)", head)
    return found and found.group(1)


def files_under(root):
    return [
        os.path.join(d, f)
        for d, _, names in os.walk(root)
        for f in names
        if not os.path.islink(os.path.join(d, f))
    ]


def clean_env():
    """An environment that tells flux nothing about this package."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FLUX_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = os.pathsep.join(
        d for d in ["/usr/local/bin", "/usr/bin", "/bin"] if os.path.isdir(d)
    )
    flux = shutil.which("flux")
    env["PATH"] = os.path.dirname(flux) + os.pathsep + env["PATH"]
    return env


# The initial program of the instances below: load by name, at run time
# and from the config, and use the command as `flux epilog-gate`.
PROGRAM = textwrap.dedent("""\
    set -e
    flux jobtap list | grep -x epilog-gate.so
    flux jobtap remove epilog-gate.so
    flux jobtap load epilog-gate.so timeout=1h
    flux jobtap query epilog-gate.so | jq -e '.config.timeout == 3600'
    id=$(flux submit --urgency=0 true)
    flux epilog-gate hold $id bb
    flux epilog-gate list | grep -q "bb *pending"
    flux cancel $id
    flux job wait-event -t 30 $id epilog-start
    flux epilog-gate release $id bb
    flux job wait-event -t 30 $id clean
    echo INSTALLED-OK
    """)


def run_instance(tmp_path, env):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "plugins.toml").write_text(
        '[job-manager]\nplugins = [ { load = "epilog-gate.so" } ]\n'
    )
    script = tmp_path / "program.sh"
    script.write_text(PROGRAM)
    return subprocess.run(
        [
            "flux",
            "start",
            "--test-size=1",
            f"--config-path={conf}",
            "sh",
            "-x",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )


def test_destdir_install_stages_a_layout_that_works_once_moved(tmp_path):
    """A packager's build: PREFIX is the final place, DESTDIR the staging
    directory; nothing staged names DESTDIR, and the tree works once copied
    to PREFIX."""
    prefix = str(tmp_path / MARK / "final")
    stage = str(tmp_path / "stage")
    pkglibdir = os.path.join(prefix, "lib", "flux-epilog-gate")
    proc = make("install-system", PREFIX=prefix, DESTDIR=stage)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    plugin_link = stage + os.path.join(PLUGINDIR, "epilog-gate.so")
    cmd_link = stage + os.path.join(CMDDIR, "flux-epilog-gate")
    assert os.readlink(plugin_link) == site_plugin(pkglibdir)
    assert os.path.isfile(stage + site_plugin(pkglibdir))
    dws = os.readlink(stage + os.path.join(PLUGINDIR, "dws.so"))
    assert dws == os.path.join(
        os.path.dirname(os.path.dirname(site_plugin(pkglibdir))), "dws", "dws.so"
    )
    assert os.path.isfile(stage + dws)
    assert os.readlink(cmd_link) == os.path.join(pkglibdir, "bin", "flux-epilog-gate")
    assert interpreter(stage + os.readlink(cmd_link)) == f"{pkglibdir}/bin/python"
    for section in ("1", "7"):
        page = os.path.join(
            stage + prefix,
            "share",
            "man",
            f"man{section}",
            f"flux-epilog-gate.{section}",
        )
        with open(page) as f:
            # docutils' versions quote and case the title line differently.
            th = [line for line in f if line.startswith(".TH ")]
        assert len(th) == 1
        assert th[0].split()[1:3] in (
            ['"FLUX-EPILOG-GATE"', section],
            ['"flux-epilog-gate"', f'"{section}"'],
        ), th
    staged = files_under(stage)
    naming_stage = [p for p in staged if stage.encode() in open(p, "rb").read()]
    assert naming_stage == []

    # Move the staged environment to its final place: it runs from there.
    shutil.copytree(stage + prefix, prefix, symlinks=True)
    cli = os.path.join(pkglibdir, "bin", "flux-epilog-gate")
    out = subprocess.run([cli, "path"], capture_output=True, text=True, env=clean_env())
    assert out.returncode == 0, out.stderr
    assert os.path.realpath(out.stdout.strip()) == os.path.realpath(
        site_plugin(pkglibdir)
    )

    proc = make("uninstall-system", PREFIX=prefix, DESTDIR=stage)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert files_under(stage) == []
    assert not os.path.lexists(plugin_link) and not os.path.lexists(cmd_link)


def ours(path):
    """A link made by this file (under the lock, one left by an
    interrupted run)."""
    return os.path.islink(path) and MARK in os.readlink(path)


@pytest.fixture(scope="module")
def flux_core_dirs():
    """The machine's flux-core plugin and command directories, for one
    test module at a time (a lock, also across test runs); links of ours
    are removed before and after, even on failure."""
    links = [
        os.path.join(PLUGINDIR, "epilog-gate.so"),
        os.path.join(PLUGINDIR, "dws.so"),
        os.path.join(CMDDIR, "flux-epilog-gate"),
    ]
    for d in (PLUGINDIR, CMDDIR):
        skip_unless(
            os.access(d, os.W_OK), f"{d} is not writable: a real install needs root"
        )
    with open(os.path.join(tempfile.gettempdir(), f"{MARK}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for link in links:
            if ours(link):
                os.unlink(link)
            else:
                skip_unless(
                    not os.path.lexists(link),
                    f"{link} exists: another install of flux-epilog-gate",
                )
        try:
            yield links
        finally:
            for link in links:
                if ours(link):
                    os.unlink(link)


class RealInstall:
    """An install into the machine's flux-core (its plugin and command
    directories, ``links``; the environment and man pages under
    ``prefix``), made by :meth:`install` and kept for the next test that
    asks for it: an install costs a new environment and a build."""

    def __init__(self, prefix, links):
        self.prefix = prefix
        self.links = links
        self.installed = False

    def install(self):
        """Install, unless the last test left the install in place."""
        if not self.installed:
            proc = make("install-system", PREFIX=self.prefix)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            self.installed = True
        return self

    def uninstall(self):
        self.installed = False
        return make("uninstall-system", PREFIX=self.prefix)


@pytest.fixture(scope="module")
def real_install(tmp_path_factory, flux_core_dirs):
    """The module's :class:`RealInstall`; all of it removed at the end,
    even on failure."""
    prefix = str(tmp_path_factory.mktemp("real") / MARK)
    real = RealInstall(prefix, flux_core_dirs)
    try:
        yield real
    finally:
        real.uninstall()


def test_real_install_loads_by_name_and_answers_as_flux_subcommand(
    real_install, tmp_path
):
    prefix, links = real_install.install().prefix, real_install.links
    pkglibdir = os.path.join(prefix, "lib", "flux-epilog-gate")
    assert os.path.realpath(links[0]) == os.path.realpath(site_plugin(pkglibdir))
    proc = run_instance(tmp_path, clean_env())
    assert proc.returncode == 0 and "INSTALLED-OK" in proc.stdout, (
        proc.stdout + proc.stderr
    )


def test_uninstall_removes_what_install_put_in_flux_core(real_install):
    prefix, links = real_install.install().prefix, real_install.links
    assert all(os.path.islink(link) for link in links)
    proc = real_install.uninstall()
    assert proc.returncode == 0, proc.stderr
    assert not any(os.path.lexists(link) for link in links)
    assert not os.path.exists(os.path.join(prefix, "lib", "flux-epilog-gate"))
    assert files_under(prefix) == []


def test_relative_destdir_is_taken_from_the_current_directory(tmp_path):
    """tools/system-install makes DESTDIR absolute before it rewrites the
    staged paths, so a relative one stages the same layout."""
    prefix = str(tmp_path / MARK / "final")
    pkglibdir = os.path.join(prefix, "lib", "flux-epilog-gate")
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        DOC_PYTHON=sys.executable,
        DESTDIR="stage",
        PKGLIBDIR=pkglibdir,
        MANDIR=os.path.join(prefix, "share", "man"),
        JOBTAP_PLUGINDIR=PLUGINDIR,
        FLUX_CMDDIR=CMDDIR,
    )
    script = os.path.join(REPO, "tools", "system-install")
    proc = subprocess.run(
        [script, "install"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stage = str(tmp_path / "stage")
    cli = stage + os.path.join(pkglibdir, "bin", "flux-epilog-gate")
    assert interpreter(cli) == f"{pkglibdir}/bin/python"
    assert files_under(stage) and not [
        p for p in files_under(stage) if stage.encode() in open(p, "rb").read()
    ]
