"""What the parts of one gate share: :class:`Context`."""


class Context:
    """The port the gate drives now, the configuration in force, the
    instance's shutdown once it is under way, and the hooks of the plugin
    that drives the gate.

    The gate makes one and hands it to each of its parts at construction;
    they read it, only the gate writes it: a reload (the next plugin
    instance's port), a ``flux config reload`` or a shutdown that begins
    replaces what it holds here, in one place, for every part at once.
    """

    __slots__ = ("port", "config", "shutdown", "on_snapshot", "listeners_changed")

    def __init__(self, port, config):
        #: The gate's port (:class:`~flux_epilog_gate.gate.port.Port`).
        self.port = port
        #: The configuration in force (:class:`~flux_epilog_gate.gate.config.Config`).
        self.config = config
        #: The instance's shutdown
        #: (:class:`~flux_epilog_gate.gate.shutdown.Shutdown`) once it is
        #: under way, else None: its hooks do nothing before, so the paths
        #: of every held job need not call them.
        self.shutdown = None
        #: Called as ``on_snapshot()`` each time a snapshot has replaced
        #: the hold log or a segment was made: the holds of that moment
        #: have outlived a log's worth of records (the plugin's memory
        #: policy); or None.
        self.on_snapshot = None
        #: Called with no argument when a listener comes or goes: the
        #: plugin driving the gate has a held job's exceptions sent to it
        #: only while some listener wants them; or None.
        self.listeners_changed = None
