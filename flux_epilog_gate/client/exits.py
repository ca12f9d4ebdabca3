"""What ``flux-epilog-gate`` tells its caller besides its output: the name
on its messages, the logger that prints them and its exit statuses (see
EXIT STATUS in flux-epilog-gate(1))."""

import logging

from .rpc import NoAnswerError

PROG = "flux-epilog-gate"
LOGGER = logging.getLogger(PROG)

#: Exit statuses (see EXIT STATUS in flux-epilog-gate(1)).
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_NO_ANSWER, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def failure_status(answers):
    """The exit status of several requests: no answer to any of them
    outweighs a refusal of any."""
    errors = [answer for answer in answers if isinstance(answer, OSError)]
    if any(isinstance(error, NoAnswerError) for error in errors):
        return EXIT_NO_ANSWER
    return EXIT_REFUSED if errors else EXIT_OK
