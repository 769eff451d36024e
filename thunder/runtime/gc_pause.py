"""Full garbage collections deferred while thunder compiles.

A compile allocates hundreds of thousands of short-lived Python objects (proxies, MLIR handles,
trace ops), so the collector's young generations fill many times over; every tenth collection
of the middle generation then is a full collection, which walks every object in the process,
the model's parameters and modules included (~480k objects and ~0.2 s each for a 24-layer
transformers Llama; two of them in its first call). The young generations are still collected
as usual; the oldest is collected by the first full collection after the compile.
"""

import contextlib
import gc
import threading

_lock = threading.Lock()
_depth = 0
_saved = None  # the thresholds before the outermost compile


@contextlib.contextmanager
def full_collections_deferred():
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            if len(_saved) == 3:
                gc.set_threshold(_saved[0], _saved[1], max(_saved[2], 1 << 30))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
