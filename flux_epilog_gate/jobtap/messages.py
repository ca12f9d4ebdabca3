"""A plugin's messages: the RPC methods it serves and their answers, and
its requests to other services."""

import json
import re

from .. import jsontext

#: A JSON escape of a UTF-16 surrogate: fine as half of a pair, but one
#: alone is no character (see :func:`decode_json`).
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def decode_json(data):
    """The JSON text ``data`` (bytes) decoded as flux-core decodes a
    payload; ValueError if flux-core would refuse it.  Python's own
    decoder is laxer than jansson: it reads bytes that are not UTF-8
    (``surrogatepass``, a byte order mark) and an escaped surrogate
    without its pair, and a string holding such a surrogate fails
    later, when it is encoded for the job-manager (a note, an event, a
    jobspec)."""
    try:
        value = jsontext.loads(data.decode())
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except (json.JSONDecodeError, UnicodeError):
        raise
    except ValueError:
        # Python's bound on the digits of an integer it reads (jansson
        # takes none past 64 bits): its text advises a Python call.
        raise ValueError("a number has too many digits") from None
    if SURROGATE_ESCAPE.search(data):
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"invalid Unicode: a lone surrogate {exc.object[exc.start]!r}"
            ) from None
    return value


class Messages:
    """Requests and responses of one plugin instance
    (:attr:`Jobtap.messages <flux_epilog_gate.jobtap.facade.Jobtap.messages>`)."""

    def __init__(self, jobtap):
        self.jobtap = jobtap
        lib = jobtap.lib
        self._respond = lib.flux_respond
        # Bound once: a request kept is one per hold of another client.
        self._gc = jobtap.ffi.gc
        self._incref = lib.flux_msg_incref
        self._decref = lib.flux_msg_decref
        #: Requests to other services in flight (their futures).
        self._rpcs = set()

    def close(self):
        """The plugin instance is gone: nothing it sent calls back."""
        self._rpcs.clear()

    # Its own services

    def register(self, method, index, guests=False, handler=None, max_bytes=0):
        """Register RPC method ``method`` (Python's number ``index``),
        answered by runtime_request_cb or by the C message handler
        ``handler`` of the plugin's extension, taking payloads of at most
        ``max_bytes`` (0: any)."""
        jobtap = self.jobtap
        lib = jobtap.lib
        rolemask = lib.FLUX_ROLE_OWNER | (lib.FLUX_ROLE_USER if guests else 0)
        cb = lib.runtime_request_cb if handler is None else handler
        jobtap.check(
            lib.runtime_service_register(
                jobtap.p, method.encode(), index, rolemask, max_bytes, cb
            )
        )

    def send(self, msg, payload):
        """Respond to request ``msg`` with ``payload`` (a dict, or None for
        an empty answer); False if that failed."""
        jobtap = self.jobtap
        if payload is None:
            return self._respond(jobtap.h, msg, jobtap.ffi.NULL) == 0
        text = jsontext.dumps_compact(payload).encode()
        return self._respond(jobtap.h, msg, text) == 0

    def send_text(self, msg, text):
        """Respond to request ``msg`` with ``text``, a JSON object's text;
        False if that failed."""
        return self._respond(self.jobtap.h, msg, text.encode()) == 0

    def respond_error(self, msg, errnum, text):
        """Respond to request ``msg`` with an error."""
        jobtap = self.jobtap
        jobtap.lib.flux_respond_error(
            jobtap.h, msg, errnum, text.encode("utf-8", "replace")
        )

    def keep_request(self, msg):
        """A reference on request ``msg`` that outlives the callback (for a
        later or streaming answer); dropped when Python collects it."""
        return self._gc(self._incref(msg), self._decref)

    def own_request(self, msg):
        """A reference on request ``msg`` that the caller owns: exactly
        one :meth:`drop_request` (or an answer that takes it) gives it
        back."""
        return self._incref(msg)

    def drop_request(self, kept):
        """Give back ``kept`` (see :meth:`own_request`) unanswered."""
        self._decref(kept)

    def is_streaming(self, msg):
        return bool(self.jobtap.lib.flux_msg_is_streaming(msg))

    def matchtag(self, msg):
        """The matchtag of request ``msg``: with its sender, it names the
        client's RPC."""
        jobtap = self.jobtap
        tag = jobtap.ffi.new("uint32_t *")
        jobtap.check(jobtap.lib.flux_msg_get_matchtag(msg, tag))
        return tag[0]

    def disconnect_match(self, msg, other):
        """True if request ``other`` came from the client that sent
        disconnect request ``msg``."""
        return bool(self.jobtap.lib.flux_disconnect_match(msg, other))

    def request_payload(self, text):
        """Decoded JSON payload of a request (None if it has none)."""
        ffi = self.jobtap.ffi
        if text == ffi.NULL:
            return None
        return decode_json(ffi.string(text))

    # Other services

    def rpc(self, topic, payload=None, callback=None):
        """Send request ``topic`` with ``payload`` (a dict) to any rank and
        return its flux Future.  With ``callback``, later call
        ``callback(future)`` when it is answered (``future.get()`` gives
        the answer or raises OSError), contained like every handler: an
        exception in it is logged, never raised.  Without, the answer is
        not waited for (dropping the future drops it)."""
        future = self.jobtap.flux.rpc(topic, payload)
        if callback is None:
            return future
        self._rpcs.add(future)

        def done(future):
            self._rpcs.discard(future)
            callback(future)

        self.jobtap.on_answer(future, f"answer to {topic}", done)
        return future
