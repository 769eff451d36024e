"""Logs users can switch on, as torch's TORCH_LOGS: one `logging` logger per area,
`logging.getLogger("thunder.<area>")`, its messages at INFO (off by default). The environment
variable THUNDER_LOGS=recompiles,splits,fusion,graph_breaks,progress (or thunder.set_logs(...))
prints the named areas on stderr.

  recompiles    each cache miss of a jitted function, with its reason
  splits        each value the program was specialized on (a data-dependent split)
  fusion        the fusion regions of each compiled program, with their executors
  graph_breaks  torch.compile(backend="thunder"): each graph Dynamo hands over, Dynamo's graph
                breaks, and graphs thunder refused (they run as torch)
  progress      a compile taking more than PROGRESS_AFTER_S seconds: kernels compiled / total
                (on by default when stderr is a terminal)
  kernels       fused regions run as torch calls while their kernel compiles in the background,
                kernels compiled there, compiles that failed (the region then stays torch calls)

The hooks are one call each at the place the event happens (runtime/jit.py, lowering/linalg)."""
import logging
import os
import sys
import time
import warnings

AREAS = ("recompiles", "splits", "fusion", "graph_breaks", "progress", "kernels")
PROGRESS_AFTER_S = 3.0  # a compile shorter than this shows no progress
_LOGGERS = {area: logging.getLogger(f"thunder.{area}") for area in AREAS}
_HANDLERS = {}


def logger(area):
    return _LOGGERS[area]


def set_logs(*areas):
    """Print these areas' messages on stderr (areas: names of AREAS, or one comma-separated
    string as THUNDER_LOGS takes it); the others go back to the default (off)."""
    _configure([a.strip() for spec in areas for a in spec.split(",") if a.strip()])


def _configure(names, reset=True):
    unknown = [a for a in names if a not in AREAS]
    if unknown:
        warnings.warn(f"thunder: unknown log areas {', '.join(map(repr, unknown))} (THUNDER_LOGS); "
                      f"expected some of {', '.join(AREAS)}", UserWarning, stacklevel=2)
    for area, lg in _LOGGERS.items():
        handler = _HANDLERS.pop(area, None)
        if handler is not None:
            lg.removeHandler(handler)
        if area not in names and not reset:
            continue
        if area in names:
            handler = _HANDLERS[area] = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(f"[thunder.{area}] %(message)s"))
            lg.addHandler(handler)
            lg.setLevel(logging.INFO)
            lg.propagate = False  # (printed once, by this handler, as TORCH_LOGS does)
        else:
            lg.setLevel(logging.NOTSET)
            lg.propagate = True


def _name(fn):
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def cache_miss(fn, number, reason):
    _LOGGERS["recompiles"].info("%s: compiling (cache miss %d): %s", _name(fn), number, reason)


def splits(fn, found):
    lg = _LOGGERS["splits"]
    if lg.isEnabledFor(logging.INFO):
        for s in found:
            lg.info("%s: program split at %s: %s = %r (another value compiles another program)",
                    _name(fn), s.location, s.what, s.value)


def fusion_regions(regions, fn=None):
    """regions: (name, executor, [op names]) of the fusion callees of a compiled program; fn:
    the function compiled (default: the one whose cache miss is under way)."""
    fn = fn if fn is not None else _progress.fn
    _progress.total += len(regions)
    lg = _LOGGERS["fusion"]
    if lg.isEnabledFor(logging.INFO):
        for name, executor, ops in regions:
            lg.info("%s: %s -> %s executor: %d ops (%s)", _name(fn), name, executor, len(ops), ", ".join(ops))


def graph_break(message, *args):
    _LOGGERS["graph_breaks"].info(message, *args)


class _Progress:
    """The compile under way (one at a time per process: compiles do not nest usefully)."""

    def __init__(self):
        self.fn, self.start, self.done, self.total, self.depth, self.shown = None, 0.0, 0, 0, 0, False


_progress = _Progress()


class compiling:
    """Around a cache miss of fn: kernels compiled in it count towards its progress."""

    def __init__(self, fn):
        self.fn = fn

    def __enter__(self):
        p = _progress
        if p.depth == 0:
            p.fn, p.start, p.done, p.total, p.shown = self.fn, time.perf_counter(), 0, 0, False
        p.depth += 1

    def __exit__(self, *exc):
        p = _progress
        p.depth -= 1
        if p.depth == 0 and p.shown:
            _LOGGERS["progress"].info("%s: compiled %d kernels in %.1f s", _name(p.fn), p.done,
                                      time.perf_counter() - p.start)


def kernel_compiled():
    """A native kernel was compiled (not found in a cache): one step of the compile's progress."""
    p = _progress
    p.done += 1
    if p.depth == 0:
        return
    elapsed = time.perf_counter() - p.start
    if elapsed >= PROGRESS_AFTER_S and _LOGGERS["progress"].isEnabledFor(logging.INFO):
        p.shown = True
        _LOGGERS["progress"].info("%s: kernels compiled %d/%d (%.1f s)", _name(p.fn), p.done,
                                  max(p.total, p.done), elapsed)


if os.environ.get("THUNDER_LOGS"):
    set_logs(os.environ["THUNDER_LOGS"])
elif sys.stderr is not None and sys.stderr.isatty():
    # an interactive run shows a long compile's progress unless THUNDER_LOGS says otherwise
    _configure(["progress"], reset=False)
