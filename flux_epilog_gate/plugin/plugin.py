"""epilog-gate.so's Python class: the gate's configuration and services.

:class:`EpilogGatePlugin` wires the job-manager's configuration, its
``flux jobtap query`` and the RPC methods to the gate
(:class:`flux_epilog_gate.gate.Gate`); what it shares with the dws
plugin, the job-manager's calls that drive the gate and its load, is
:class:`~.driver.GateDriver`; the owner's hold and release, decoded in
C, are :mod:`.fast`'s.  The runtime (:mod:`flux_epilog_gate.jobtap`)
contains every exception: one becomes an error return (or an error
response) and one log line, never a crash of the job-manager.
"""

import errno
import syslog

from ..errors import GateError
from ..gate import protocol
from ..gate.config import Config, ConfigError
from ..gate.shutdown import loaded_from_config
from ..jobtap.plugin import Refused, plugin_topic, request
from . import fast
from .driver import GateDriver, after_recovery
from .gcpolicy import FREEZER

#: The largest payload of a request to the gate (see gate/protocol.py).
MAX_BYTES = protocol.REQUEST_BYTES_MAX


def _answers_refusals(handler):
    """A request handler whose GateError (ValueError: a malformed payload)
    is its answer."""

    def wrapper(self, request):
        self.fault("request")
        try:
            handler(self, request)
        except GateError as exc:
            request.error(exc.errnum, exc.message)
        except ValueError as exc:
            request.error(errno.EPROTO, f"{request.method}: malformed payload: {exc}")

    wrapper.__name__ = handler.__name__
    wrapper.__doc__ = handler.__doc__
    return wrapper


class EpilogGatePlugin(GateDriver):
    """epilog-gate.so: the gate's configuration, rules and services.  It
    drives the gate whenever it is loaded."""

    drive_rank = 1

    def __init__(self, jobtap):
        super().__init__(jobtap)
        #: The owner's hold and release, decoded in C, and every hold and
        #: release's answer.
        self.fast = fast.FastPath(self)
        #: Why the configuration in force is not the instance's (a load
        #: despite a bad one while the instance started), or None.
        self.config_error = None
        if self.jobtap.load_options().get("debug-fault") == "init":
            raise RuntimeError("debug-fault=init: injected failure")

    # Plugin callbacks

    @plugin_topic("conf.update")
    def configure(self, args):
        """The load, and each ``flux config reload``: a bad configuration
        is refused, unless the instance is starting (see
        :meth:`_despite`)."""
        conf = args.input.get("conf") or {}
        try:
            config = Config.from_sources(
                self.jobtap.load_options(), conf.get("epilog-gate")
            )
        except ConfigError as exc:
            config = self._despite(exc, conf.get("epilog-gate"))
        else:
            self._config_good()
        if not self.committed:
            self.commit(config)
        else:
            self.gate.reconfigure(config)
            self.forward(new=self._load_timer is not None, depend=bool(config.rules))
        self.shutdown.configured(loaded_from_config(conf, self.name))

    def _despite(self, error, table):
        """The configuration to load with despite ``error``, while the
        instance starts; else Refused, which fails the load or the reload
        with the error (an admin's ``flux jobtap load`` or ``flux config
        reload``: they see it, and what is loaded stays).

        While the job-manager starts (it loads ``[job-manager] plugins``
        then, and a failed load stops it and the instance) or while rc1
        runs (a failed ``flux jobtap load`` there fails rc1), a refusal
        would keep the instance from starting, and its jobs' holds from
        being recovered.  The gate then loads with the load options
        alone, or the table alone, or the defaults, and says so at
        level error and in ``flux jobtap query`` (``config_error``)."""
        if not self.instance_starting():
            raise Refused(f"epilog-gate: {error}") from None
        if self.committed:
            # The job-manager's second conf.update of its start: the
            # configuration loaded despite the error stays.
            config, in_force = self.gate.config, None
        else:
            config, in_force = self._fallback(table)
        if in_force is not None or self.config_error is None:
            self.config_error = f"{error}: {in_force or 'configuration kept'}"
            self.jobtap.log(syslog.LOG_ERR, self.config_error)
        return config

    def _fallback(self, table):
        """The configuration a load despite an error takes, and what it
        is: the load options without the table, else the table without
        the options, else the defaults."""
        for options, kept_table, in_force in (
            (
                self.jobtap.load_options(),
                None,
                "the [epilog-gate] table is ignored and its keys have their "
                "defaults (fix it, then flux config reload)",
            ),
            (
                None,
                table,
                "the load options are ignored and have their defaults "
                "(fix them, then load the plugin again)",
            ),
        ):
            try:
                return Config.from_sources(options, kept_table), in_force
            except ConfigError:
                continue
        return Config(), (
            "the load options and the [epilog-gate] table are ignored: "
            "the defaults are in force"
        )

    def _config_good(self):
        """A configuration was taken whole: an earlier error is over."""
        if self.config_error is not None:
            self.jobtap.log(
                syslog.LOG_INFO, "the configuration is good again: it is in force"
            )
            self.config_error = None

    @plugin_topic("plugin.query")
    def query(self, args):
        self.fault("query")
        gate = self.gate
        return {
            **self.log_status(),
            "config": gate.config.to_dict(),
            "config_error": self.config_error,
            "counters": dict(
                gate.counters(),
                gc_freezes=FREEZER.freezes,
                gc_collections_frozen=FREEZER.collections,
                gc_frozen=FREEZER.frozen(),
            ),
            "holds": gate.list(),
        }

    # Requests

    @request("disconnect", guests=True, max_bytes=MAX_BYTES)
    @after_recovery
    def disconnect(self, request):
        self.gate.unwatch(
            lambda sink: self.jobtap.messages.disconnect_match(request.msg, sink)
        )

    @request("hold", guests=True, c_handler="gate_hold_cb", max_bytes=MAX_BYTES)
    @after_recovery
    @_answers_refusals
    def hold_request(self, request):
        """The general path of ``hold`` (the owner's well-formed requests
        come decoded from C, see :mod:`.fast`)."""
        _require_owner("hold", request.owner)
        payload = request.payload
        parsed = protocol.parse_hold(payload)
        self.fast.hold_message(
            request.msg, *parsed, point=protocol.parse_hold_point(payload)
        )

    @request("release", guests=True, c_handler="gate_release_cb", max_bytes=MAX_BYTES)
    @after_recovery
    @_answers_refusals
    def release_request(self, request):
        _require_owner("release", request.owner)
        self.fast.release_message(request.msg, *protocol.parse_release(request.payload))

    @request("list", guests=True, max_bytes=MAX_BYTES)
    @after_recovery
    @_answers_refusals
    def list_request(self, request):
        payload = request.payload if request.payload is not None else {}
        jobid = protocol.parse_list(payload)
        text = self.gate.list_json(
            jobid,
            userid=None if request.owner else request.userid,
            columns=protocol.parse_list_columns(payload),
        )
        self.jobtap.messages.send_text(request.msg, text)

    @request("snapshot", guests=True, max_bytes=MAX_BYTES)
    @after_recovery
    @_answers_refusals
    def snapshot_request(self, request):
        """Replace the hold log with a snapshot now (the owner only; an
        admin's tool, e.g. before a downgrade): answered once it has,
        with the log's bytes."""
        _require_owner("snapshot", request.owner)
        protocol.parse_snapshot(request.payload)
        kept = request.keep()

        def done(size, error):
            jobtap = self.jobtap
            if jobtap.p is None:
                return
            if error is not None:
                text = f"snapshot: {error.strerror or error}"
                jobtap.messages.respond_error(kept, error.errno or errno.EIO, text)
            else:
                jobtap.messages.send(kept, {"bytes": size})

        self.gate.snapshot(done)

    @request("watch", guests=True, max_bytes=MAX_BYTES)
    @after_recovery
    @_answers_refusals
    def watch_request(self, request):
        if not self.jobtap.messages.is_streaming(request.msg):
            raise GateError(errno.EPROTO, "watch: request must be streaming")
        payload = request.payload
        payload = payload if payload is not None else {}
        descriptions = protocol.parse_watch(payload)
        points = protocol.parse_watch_points(payload)
        lost = protocol.parse_watch_lost(payload)
        if lost and not request.owner:
            # Delivering a lost hold takes it from the services that wait
            # for it: the owner's alone.
            raise GateError(
                errno.EPERM, "watch: only the instance owner may watch lost holds"
            )
        self.gate.watch(
            request.keep(),
            descriptions,
            userid=None if request.owner else request.userid,
            points=points,
            lost=lost,
        )

    @request("watch-ack", guests=True, max_bytes=MAX_BYTES)
    @_answers_refusals
    def watch_ack_request(self, request):
        """A watcher read ``count`` activations of its stream (named by the
        matchtag of its watch request, from the same connection)."""
        matchtag, count = protocol.parse_watch_ack(request.payload)
        msg = request.msg

        def match(sink):
            return (
                self.jobtap.messages.disconnect_match(msg, sink)
                and self.jobtap.messages.matchtag(sink) == matchtag
            )

        self.gate.acknowledge(match, count)
        # Sent with FLUX_RPC_NORESPONSE by the client: then nothing goes.
        self.jobtap.messages.send(msg, {})

    @classmethod
    def bind_externs(cls, ffi, lib):
        """Define the extern "Python" functions fastpath.c calls (see
        :mod:`.fast`)."""
        fast.bind_externs(ffi)


def _require_owner(method, owner):
    if not owner:
        raise GateError(errno.EPERM, f"{method}: only the instance owner may {method}")
