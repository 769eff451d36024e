"""torch.compile(fn_or_module, backend="thunder"): thunder as a backend of torch.compile.

The backend is registered through the `torch_dynamo_backends` entry point (pyproject.toml), so
`torch.compile(model, backend="thunder")` works without `import thunder`. Dynamo captures the
function's graphs (torch.fx GraphModules; its graph breaks handle what it cannot capture) and
hands each to `thunder_backend`, which returns `thunder.jit(graph_module.forward)`: our interpreter runs
the GraphModule's generated forward, then the MLIR passes, fusion and the runtime as for any
jitted module. Dynamo calls the result with real tensors; inputs that require grad go through
thunder's own forward/backward (a torch.autograd.Function), so training works without
AOTAutograd. `options={...}` are thunder.jit's keyword options (executors, cache, fusion, ...).

Where thunder refuses a graph (an error while tracing or compiling it that running the
GraphModule itself does not have), that graph runs as the GraphModule (torch's eager
execution) from then on, and the reason is logged (THUNDER_LOGS=graph_breaks) and kept in
`graphs()`: never an error the user would not have with backend="eager". (A graph whose
compiled program fails while running is run again as the GraphModule: a graph that updates its
inputs in place could then update them twice; Dynamo's graphs rarely do, thunder's refusals
happen while tracing, before anything runs.)"""
import logging
from dataclasses import dataclass

import torch

import thunder
from thunder.core import logs


@dataclass
class Graph:
    """One graph Dynamo handed to the backend."""
    compile_id: str  # Dynamo's "frame/recompile" id, "0/0"
    nodes: int  # call nodes of the graph
    status: str  # "thunder" or "torch" (thunder refused it: it runs as the GraphModule)
    reason: str | None = None  # why thunder refused it
    jitted: object = None  # the thunder.jit of the graph (thunder.last_traces(...), compile_stats)
    graph_module: object = None


_GRAPHS = []
_BREAKS_SEEN = {}  # Dynamo's graph-break reasons reported so far -> count


def graphs():
    """The graphs the backend received in this process, in order (Graph records)."""
    return list(_GRAPHS)


def reset():
    """Forget the records (torch._dynamo.reset() forgets the compiled graphs themselves)."""
    _GRAPHS.clear()


def _compile_id():
    try:
        cid = torch._guards.CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001 - only a label for the logs
        return "?"
    return str(cid) if cid is not None else "?"


def _report_graph_breaks():
    """Dynamo's graph breaks since the last graph (its counters keep each reason)."""
    from torch._dynamo.utils import counters  # (torch._dynamo: imported only by torch.compile users)

    for reason, count in counters["graph_break"].items():
        if _BREAKS_SEEN.get(reason, 0) < count:
            _BREAKS_SEEN[reason] = count
            logs.graph_break("graph break (Dynamo): %s", reason.strip().splitlines()[0] if reason.strip() else reason)


class _Compiled:
    """What Dynamo calls for one graph: thunder's program, or the GraphModule once thunder
    refused the graph."""

    def __init__(self, record):
        self.record = record

    def __call__(self, *args):
        record = self.record
        if record.status == "torch":
            return record.graph_module(*args)
        try:
            return record.jitted(*args)
        except Exception as e:  # noqa: BLE001 - decided below: eager's error, or thunder's refusal
            refused = e
        # the GraphModule itself: eager's error (raised as is), or thunder refused the graph
        out = record.graph_module(*args)
        record.status, record.reason = "torch", f"{type(refused).__name__}: {refused}"
        logs.graph_break("graph %s runs as torch: thunder refused it: %s", record.compile_id, record.reason)
        return out


def thunder_backend(gm, example_inputs, *, options=None, mode=None):
    """The torch.compile backend: gm (a torch.fx.GraphModule Dynamo captured) -> a callable."""
    if mode not in (None, "default"):
        logs.logger("graph_breaks").warning("thunder backend: mode=%r is ignored (use options=...)", mode)
    _report_graph_breaks()
    nodes = sum(1 for n in gm.graph.nodes if n.op.startswith("call"))
    record = Graph(_compile_id(), nodes, "thunder", graph_module=gm)
    if getattr(gm, "_needs_recompile", lambda: False)():
        gm.real_recompile()  # (a lazy GraphModule generates its forward on its first call)
    # its generated forward (GraphModule.__call__ only adds error reporting that writes the
    # module's state); attributes it reads (get_attr) are read at call time, as for a module.
    # (options thunder.jit rejects raise here: the user's to fix)
    record.jitted = thunder.jit(gm.forward, **(options or {}))
    _GRAPHS.append(record)
    if logs.logger("graph_breaks").isEnabledFor(logging.INFO):
        logs.graph_break("graph %s: %d calls to thunder", record.compile_id, nodes)
    return _Compiled(record)
