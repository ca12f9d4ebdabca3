"""The cyclic garbage collector's view of the gate's long-lived state.

The gate keeps an object graph that grows with its holds (about three
tracked objects a hold: 100,000 holds are some 300,000), and nearly all
of it lives as long as its hold.  A full collection (generation 2) walks
every tracked object of the broker's one interpreter, whatever triggered
it: with 100,000 holds that is about a tenth of a second in the
job-manager's thread, at whatever allocation crosses the threshold.

:meth:`Freezer.freeze` moves every object tracked at that moment to the
permanent generation (``gc.freeze()``), which collections no longer
walk.  The plugin calls it once a load is ready (the holds it recovered)
and whenever the hold log completes a snapshot or makes a segment (the
holds at that point have outlived a log's worth of records).  Every generation is
collected first, so no cyclic garbage of that moment is frozen; once
the first freeze is made that walks only the objects made since the
last one.

What it costs: a frozen object that later becomes cyclic garbage is
never reclaimed.  The gate's records of holds, jobs and requests form no
reference cycles (they are freed by reference counting alone, frozen or
not); the test suite checks that they leave none.
"""

import gc


class Freezer:
    """Freezes the interpreter's objects and counts the times it did.
    One per interpreter: the collector is the interpreter's."""

    def __init__(self):
        #: Times :meth:`freeze` ran.
        self.freezes = 0

    def freeze(self):
        """Exempt every object tracked now from future collections."""
        gc.collect()
        gc.freeze()
        self.freezes += 1

    @staticmethod
    def frozen():
        """Objects in the permanent generation."""
        return gc.get_freeze_count()


#: The interpreter's freezer, shared by every plugin instance.
FREEZER = Freezer()
