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

Between those freezes the interpreter still makes full collections of
its own (when enough objects have survived two younger ones), each
walking every object made since the last freeze: 50 ms and more in the
middle of a burst of 100,000 holds.  So :meth:`Freezer.install` also
freezes the survivors of every full collection as it ends: the
collection has just freed what cyclic garbage there was, and the next
one walks only the objects made since.

What it costs: a frozen object that later becomes cyclic garbage is
never reclaimed.  The gate's records of holds, jobs and requests form no
reference cycles (they are freed by reference counting alone, frozen or
not); the test suite checks that they leave none.  Nor do the runtime's
futures once answered (:meth:`Jobtap.on_answer`): a future the bindings
tie to itself until then, frozen while in flight, is freed all the same.
"""

import gc


class Freezer:
    """Freezes the interpreter's objects and counts the times it did.
    One per interpreter: the collector is the interpreter's."""

    def __init__(self):
        #: Times :meth:`freeze` ran.
        self.freezes = 0
        #: Full collections of the interpreter's own whose survivors
        #: were frozen (see :meth:`install`).
        self.collections = 0
        self._installed = False
        self._freezing = False

    def install(self):
        """From now on, freeze the survivors of each full collection as
        it ends (once per interpreter, however often it is called)."""
        if not self._installed:
            gc.callbacks.append(self._collected)
            self._installed = True

    def _collected(self, phase, info):
        if phase == "stop" and info["generation"] == 2:
            gc.freeze()
            if not self._freezing:
                self.collections += 1

    def freeze(self):
        """Exempt every object tracked now from future collections."""
        self._freezing = True
        try:
            gc.collect()
        finally:
            self._freezing = False
        gc.freeze()
        self.freezes += 1

    @staticmethod
    def frozen():
        """Objects in the permanent generation."""
        return gc.get_freeze_count()


#: The interpreter's freezer, shared by every plugin instance.
FREEZER = Freezer()
