#!/usr/bin/env python3
"""rst2man for any docutils version: reStructuredText in, man page out.

Same arguments as docutils' rst2man (``rst2man.py [options] SOURCE DEST``).
"""

import sys

try:
    from docutils.core import publish_cmdline
except ImportError:
    sys.exit("rst2man.py: Python docutils is not installed (pip install docutils)")

publish_cmdline(writer_name="manpage", description=__doc__)
