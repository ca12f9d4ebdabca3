"""The one error type of the gate: an errno and a message for the caller."""

import errno
import os


class GateError(Exception):
    """A request the gate refuses; nothing was changed.

    ``errnum`` is what an RPC answers with; ``message`` names the problem.
    """

    def __init__(self, errnum, message):
        super().__init__(message)
        self.errnum = errnum
        self.message = message

    def __str__(self):
        return self.message

    @classmethod
    def from_oserror(cls, exc, what):
        """Turn an OSError from flux into a GateError about ``what``."""
        errnum = exc.errno or errno.EIO
        return cls(errnum, f"{what}: {os.strerror(errnum)}")
