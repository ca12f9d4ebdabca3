"""Throwaway Flux instances for the tests, the benchmark and the demo.

:class:`Instance` runs ``flux start --test-size=N`` in the background with
its own state directory, optionally fake resources and a config file, and
tells how to reach it (``uri``, ``env``, ``handle()``).  It can be stopped
and started again on the same state directory to exercise a restart.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time

import flux

START_TIMEOUT = 60.0


def flux_command():
    """Path of the ``flux`` command, or an error that says flux-core is
    missing."""
    path = shutil.which("flux")
    if path is None:
        raise RuntimeError(
            "the 'flux' command is not on PATH: flux-core is a prerequisite "
            "(see README.md)"
        )
    return path


class Instance:
    """A ``flux start`` test instance.

    ``cores``: give the instance fake resources of that many cores per
    broker, never verified against the machine.  ``config``: extra TOML
    for the instance config.  ``plugin``: path of a jobtap plugin to load
    from the config (so it is also loaded on restart), with ``plugin_conf``
    its options; ``plugins``: more ``(path, options)`` loaded after it,
    in that order.  ``job_cleanup``: let shutdown run flux-core's job
    cleanup step (cancel running jobs, wait until no job is in RUN or
    CLEANUP); by default it is disabled.
    """

    def __init__(
        self,
        size=1,
        cores=None,
        config="",
        plugin=None,
        plugin_conf=None,
        plugins=(),
        statedir=None,
        env=None,
        job_cleanup=False,
    ):
        self.size = size
        self.cores = cores
        self.config = config
        self.plugin = plugin
        self.plugin_conf = plugin_conf or {}
        self.plugins = list(plugins)
        self.tmpdir = tempfile.mkdtemp(prefix="epilog-gate-")
        self.statedir = statedir or os.path.join(self.tmpdir, "state")
        self.confdir = os.path.join(self.tmpdir, "conf")
        # Shutting down must not wait for (or cancel) held jobs: tests
        # stop instances with holds active and may start them again.
        self.extra_env = {} if job_cleanup else {"FLUX_DISABLE_JOB_CLEANUP": "1"}
        self.extra_env.update(env or {})
        self.proc = None
        self.uri = None
        os.makedirs(self.statedir, exist_ok=True)
        os.makedirs(self.confdir, exist_ok=True)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        self.cleanup()

    @property
    def env(self):
        """Environment for commands that talk to this instance."""
        env = dict(os.environ, **self.extra_env)
        env["FLUX_URI"] = self.uri
        return env

    def handle(self):
        return flux.Flux(self.uri)

    def write_config(self):
        """(Re)write the instance config from the current settings."""
        text = self.config
        if self.cores:
            text += self._resource_config()
        if self.plugin or self.plugins:
            text += self._plugin_config()
        with open(os.path.join(self.confdir, "instance.toml"), "w") as f:
            f.write(text)

    def _resource_config(self):
        path = os.path.join(self.tmpdir, "R.json")
        if not os.path.exists(path):
            ranks = f"0-{self.size - 1}" if self.size > 1 else "0"
            out = subprocess.run(
                [
                    flux_command(),
                    "R",
                    "encode",
                    f"--ranks={ranks}",
                    f"--cores=0-{self.cores - 1}",
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            with open(path, "w") as f:
                f.write(out)
        return f'\n[resource]\nnoverify = true\npath = "{path}"\n'

    def _plugin_config(self):
        loads = [(self.plugin, self.plugin_conf)] if self.plugin else []
        entries = []
        for path, options in loads + self.plugins:
            conf = ", ".join(f"{k!s} = {_toml(v)}" for k, v in options.items())
            entries.append(f'{{ load = "{path}", conf = {{ {conf} }} }}')
        return f"\n[job-manager]\nplugins = [ {', '.join(entries)} ]\n"

    def start(self):
        """Start the instance and wait until it answers."""
        self.write_config()
        urifile = os.path.join(self.tmpdir, "uri")
        if os.path.exists(urifile):
            os.unlink(urifile)
        cmd = [
            flux_command(),
            "start",
            f"--test-size={self.size}",
            f"--config-path={self.confdir}",
            f"-Sstatedir={self.statedir}",
            "sh",
            "-c",
            f'echo "$FLUX_URI" >{urifile}.tmp && '
            f"mv {urifile}.tmp {urifile} && exec sleep 1000000",
        ]
        log = open(os.path.join(self.tmpdir, "broker.log"), "ab")
        env = dict(os.environ, **self.extra_env)
        env.pop("FLUX_URI", None)
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        deadline = time.time() + START_TIMEOUT
        while not os.path.exists(urifile):
            if self.proc.poll() is not None:
                raise RuntimeError(f"flux start failed:\n{self.log()}")
            if time.time() > deadline:
                self.kill()
                raise RuntimeError(f"flux start timed out:\n{self.log()}")
            time.sleep(0.02)
        with open(urifile) as f:
            self.uri = f.read().strip()

    def log(self):
        try:
            with open(os.path.join(self.tmpdir, "broker.log"), errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def flux(self, *args, check=True, input=None, timeout=60):
        """Run ``flux ARGS`` against the instance; return the completed
        process (stdout and stderr as text)."""
        return subprocess.run(
            [flux_command(), *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            input=input,
            timeout=timeout,
        )

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=60):
        """Shut the instance down cleanly (its state directory is kept)."""
        if not self.alive():
            return
        try:
            self.flux("shutdown", "--quiet", timeout=timeout, check=False)
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self):
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def cleanup(self):
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def _toml(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
