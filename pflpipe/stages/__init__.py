"""The pipeline stages, one module each, with `run(spec, ..., tracker=NULL_TRACKER)`.

Components call these; every stage is testable as a plain function without kfp.

A stage is a process of its own, and once it has written its outputs only its exit is left:
Python's last garbage collections over everything torch and mlflow loaded took 1.5–3 s per
process here (docs/performance.md, start-up). `gc.freeze` at exit (after the other exit handlers
ran) spares them; memory goes back to the system as always, and Python never promised to
finalize objects still alive at exit.
"""

import atexit
import gc

atexit.register(gc.freeze)
