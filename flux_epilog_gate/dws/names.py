"""The names flux-coral2's rabbit workflow shares with its DWS service
and its tests: hold descriptions, exception types, the jobspec key."""

#: The jobspec key of a rabbit job: other jobs never enter Python.
DW = "attributes.system.dw"

#: The three holds of a rabbit job, as dws-jobtap.so names its actions.
CREATE = "dws-create"
SETUP = "dws-setup"
EPILOG = "dws-epilog"

#: The exception type of the epilog timeout (``epilog-timeout``).
EPILOG_TIMEOUT = "dws-epilog-timeout"

#: The note of every exception the service's answers cause starts so.
FAILED = "DWS workflow interactions failed: "
OUT_OF_SYNC = (
    ", coral2_dws module and dws_jobtap plugin versions may be out of sync,"
    " Flux may need to be restarted"
)
NO_SERVICE = (
    "dws.create RPC could not be sent. "
    "Admins: is the flux-coral2-dws service loaded?"
)
