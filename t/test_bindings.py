"""Which flux-core Python bindings the install chose, and that the job-manager's
embedded interpreter, the command line and the client all use them; an
install that cannot work fails while building, saying what to do."""

import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import flux
import pytest
from conftest import REPO, skip_unless

import flux_epilog_gate
from flux_epilog_gate import _buildinfo
from flux_epilog_gate.jobtap import build

FLUX_VERSION = subprocess.run(
    ["pkg-config", "--modversion", "flux-core"],
    check=True,
    capture_output=True,
    text=True,
).stdout.strip()
OWN = os.path.join(_buildinfo.FLUX_LIBDIR, "python%d.%d" % sys.version_info[:2])


def own_bindings_load():
    """Can this Python load flux-core's own bindings?  (Asked here
    independently of the build's own check.)"""
    code = (
        f"import sys; sys.path.insert(0, {OWN!r}); "
        "import _flux._core as c; print(c.__file__)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    where = os.path.dirname(os.path.realpath(proc.stdout.strip()))
    return proc.returncode == 0 and where == os.path.realpath(f"{OWN}/_flux")


def core_module_file():
    """The compiled flux-core bindings this process imported."""
    import _flux._core

    return os.path.realpath(_flux._core.__file__)


def test_install_chose_own_bindings_exactly_when_they_load_in_this_python():
    expected = "flux-core" if own_bindings_load() else "flux-python"
    assert _buildinfo.BINDINGS == expected


def test_dependencies_name_flux_python_of_the_installed_flux_core_version():
    requires = importlib.metadata.requires("flux-epilog-gate")
    names = [r.split(";")[0].replace(" ", "") for r in requires]
    assert "ply" in names
    if _buildinfo.BINDINGS == "flux-python":
        assert f"flux-python=={FLUX_VERSION}" in names
        assert importlib.metadata.version("flux-python") == FLUX_VERSION
    else:
        assert not [n for n in names if n.startswith("flux-python")]


def test_client_imports_the_chosen_bindings():
    path = os.path.realpath(flux.__file__)
    if _buildinfo.BINDINGS == "flux-core":
        assert path.startswith(os.path.realpath(os.path.join(OWN, "flux")) + os.sep)
    else:
        site = os.path.realpath(sysconfig.get_paths()["purelib"])
        assert path.startswith(site + os.sep)


def broker_maps(instance):
    pid = instance.flux("getattr", "broker.pid").stdout.strip()
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[-1] for line in f if "/" in line}


def test_job_manager_embeds_the_bindings_the_client_uses(instance):
    # The plugin's Python imports flux when the plugin loads.
    assert "epilog-gate" in instance.flux("jobtap", "list").stdout
    mapped = {os.path.realpath(p) for p in broker_maps(instance)}
    cores = {p for p in mapped if os.path.basename(p).startswith("_core.")}
    assert cores == {core_module_file()}


def test_cli_runs_as_flux_subcommand_with_the_chosen_bindings(instance):
    bindir = os.path.dirname(sys.executable)
    env = dict(instance.env, PATH=bindir + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(
        ["flux", "epilog-gate", "path"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == flux_epilog_gate.plugin_path()


@pytest.mark.skipif(
    _buildinfo.BINDINGS != "flux-python",
    reason="only an install on flux-python can meet another Python's bindings",
)
def test_flux_core_bindings_of_another_python_on_pythonpath_are_ignored(
    instance, tmp_path
):
    # `flux env` puts flux-core's own bindings on PYTHONPATH.
    foreign = build.own_bindings_dirs()
    assert foreign, "flux-core has bindings for no Python at all"
    env = dict(instance.env, PYTHONPATH=os.pathsep.join(foreign))
    code = "import flux_epilog_gate, flux; print(flux.__file__)"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the source tree
    )
    assert proc.returncode == 0, proc.stderr
    assert os.path.realpath(proc.stdout.strip()) == os.path.realpath(flux.__file__)
    cli = os.path.join(os.path.dirname(sys.executable), "flux-epilog-gate")
    proc = subprocess.run([cli, "list", "--json"], env=env, capture_output=True)
    assert proc.returncode == 0, proc.stderr


# Install failures: pip builds a copy of the source tree with flux-core's
# pkg-config data changed; each must fail before any build, saying what
# to do.


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    dest = tmp_path_factory.mktemp("src") / "flux-epilog-gate"
    ignore = shutil.ignore_patterns(
        ".venv*", "build", "*.egg-info", "__pycache__", "*.so", "_buildinfo.py"
    )
    os.makedirs(dest)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(os.path.join(REPO, name), dest)
    shutil.copytree(
        os.path.join(REPO, "flux_epilog_gate"), dest / "flux_epilog_gate", ignore=ignore
    )
    return dest


def fake_flux_core_pc(tmp_path, version=FLUX_VERSION, includedir=None):
    """A flux-core.pc like the installed one, with some values replaced."""
    real = subprocess.run(
        ["pkg-config", "--path", "flux-core"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    lines = []
    with open(real) as f:
        for line in f:
            if line.startswith("Version:"):
                line = f"Version: {version}\n"
            elif includedir and line.startswith("includedir="):
                line = f"includedir={includedir}\n"
            lines.append(line)
    pcdir = tmp_path / "pkgconfig"
    pcdir.mkdir()
    (pcdir / "flux-core.pc").write_text("".join(lines))
    return str(pcdir)


def pip_wheel(source, tmp_path, **env):
    wheels = tmp_path / "wheels"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-w",
            str(wheels),
            str(source),
        ],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, list(wheels.glob("*.whl")) if wheels.exists() else []


def test_install_without_flux_core_development_files_fails_saying_so(source, tmp_path):
    proc, wheels = pip_wheel(
        source, tmp_path, PKG_CONFIG_LIBDIR=str(tmp_path), PKG_CONFIG_PATH=""
    )
    assert proc.returncode != 0 and not wheels
    assert "flux-core's development files were not found" in proc.stderr
    assert "PKG_CONFIG_PATH" in proc.stderr


def test_install_without_flux_core_headers_fails_saying_so(source, tmp_path):
    pcdir = fake_flux_core_pc(tmp_path, includedir=str(tmp_path / "none"))
    proc, wheels = pip_wheel(source, tmp_path, PKG_CONFIG_PATH=pcdir)
    assert proc.returncode != 0 and not wheels
    assert "flux-core's headers (flux/jobtap.h) were not found" in proc.stderr


def test_install_needing_flux_python_of_an_unreleased_flux_core_fails(source, tmp_path):
    pcdir = fake_flux_core_pc(tmp_path, version=f"{FLUX_VERSION}-12-gdeadbee")
    proc, wheels = pip_wheel(
        source, tmp_path, PKG_CONFIG_PATH=pcdir, FLUX_EPILOG_GATE_BINDINGS="flux-python"
    )
    assert proc.returncode != 0 and not wheels
    assert f"flux-core {FLUX_VERSION}-12-gdeadbee is not a release" in proc.stderr
    assert "Install with a Python that flux-core was built for" in proc.stderr


def test_forcing_own_bindings_that_do_not_fit_fails(source, tmp_path):
    libdir = tmp_path / "fluxlib"
    (libdir / "python2.7" / "flux").mkdir(parents=True)
    pc = fake_flux_core_pc(tmp_path)
    text = open(os.path.join(pc, "flux-core.pc")).read()
    text = "\n".join(
        f"fluxlibdir={libdir}" if line.startswith("fluxlibdir=") else line
        for line in text.splitlines()
    )
    with open(os.path.join(pc, "flux-core.pc"), "w") as f:
        f.write(text + "\n")
    proc, wheels = pip_wheel(
        source, tmp_path, PKG_CONFIG_PATH=pc, FLUX_EPILOG_GATE_BINDINGS="flux-core"
    )
    assert proc.returncode != 0 and not wheels
    assert "flux-core's own Python bindings do not fit Python" in proc.stderr
    assert "they exist for: python2.7" in proc.stderr


def test_python_without_shared_libpython_is_refused(monkeypatch):
    real = sysconfig.get_config_var
    monkeypatch.setattr(
        sysconfig,
        "get_config_var",
        lambda name: 0 if name == "Py_ENABLE_SHARED" else real(name),
    )
    with pytest.raises(
        build.BuildError, match="has no shared libpython.*--enable-shared"
    ):
        build.check_libpython()


def test_python_with_shared_libpython_passes():
    build.check_libpython()


def another_python():
    """A Python of another version than this one, if the machine has one."""
    mine = "%d.%d" % sys.version_info[:2]
    candidates = [shutil.which(f"python3.{minor}") for minor in range(8, 14)]
    candidates += sorted(
        glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*"))
    )
    candidates += [shutil.which("python3"), "/usr/bin/python3"]
    for python in candidates:
        if not python or not re.search(r"python3(\.\d+)?$", python):
            continue
        proc = subprocess.run(
            [python, "-c", 'import sys; print("%d.%d" % sys.version_info[:2])'],
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0 and proc.stdout.strip() not in ("", mine):
            return python
    return None


def test_make_install_refuses_a_venv_made_with_another_python():
    python = another_python()
    skip_unless(python is not None, "no Python of another version on this machine")
    stamp = os.path.join(sys.prefix, ".installed")
    before = os.stat(stamp).st_mtime if os.path.exists(stamp) else None
    proc = subprocess.run(
        ["make", "-s", "-C", REPO, "install", f"PYTHON={python}", f"VENV={sys.prefix}"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert (
        f"{sys.prefix} has Python {sys.version_info[0]}.{sys.version_info[1]}, not"
        in (proc.stderr)
    )
    assert "give another VENV" in proc.stderr
    after = os.stat(stamp).st_mtime if os.path.exists(stamp) else None
    assert before == after
