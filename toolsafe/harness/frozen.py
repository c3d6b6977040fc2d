"""Imported last by the preloaded interpreter (``preload.PRELOAD``): everything imported
so far moves to the collector's permanent generation (``gc.freeze``).

A child forked from that interpreter shares those objects' memory pages with it. A full
collection in the child (Celery's prefork pool runs one before it forks each pool
process) would otherwise walk every preloaded object, and touching them copies their
pages: a tenth of a second of CPU per collection, for objects that live as long as the
process anyway. Frozen, they are left alone; what the child makes itself is collected
as usual.
"""

from __future__ import annotations

import gc

gc.collect()
gc.freeze()
