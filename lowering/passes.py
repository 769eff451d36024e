"""Our MLIR passes, registered by name, and pipelines that mix them with upstream passes.

A pipeline is MLIR's textual form, e.g. `builtin.module(thunder-decompose,cse,canonicalize)`.
Upstream passes go to MLIR as text; ours are Python passes added by callable (MLIR's textual
parser does not know Python-defined passes)."""
from dataclasses import dataclass
from typing import Callable

from thunder.dialects.mlir import passmanager
from thunder.lowering import autograd, decompose, functionalize, fuse, remat


@dataclass
class PassInfo:
    name: str
    run: Callable  # run(module_op) -> None
    description: str


PASSES: dict[str, PassInfo] = {}


def register_pass(name, description):
    def decorator(fn):
        PASSES[name] = PassInfo(name, fn, description)
        return fn

    return decorator


def _load_passes():
    if "thunder-functionalize" not in PASSES:
        register_pass("thunder-functionalize", "Turn ltorch.copy_ into a func argument into an extra result "
                      "(thunder.mutated_inputs) that the program copies back")(functionalize.functionalize_module)

    if "thunder-remat" not in PASSES:
        register_pass("thunder-remat", "Choose what @forward saves for @backward by a min-cut; "
                      "recompute cheap ops in @backward")(remat.remat_module)

    if "thunder-autograd" not in PASSES:
        register_pass("thunder-autograd", "Split func @computation into @forward (outputs + saved values) "
                      "and @backward (saved values + cotangents -> input gradients)")(autograd.autograd_module)

    if "thunder-fuse" not in PASSES:
        register_pass("thunder-fuse", "Outline regions of ops a fusion executor claims into func.func "
                      "private @fusion_N (thunder.executor = \"linalg\" on CPU tensors, \"cuda\" on CUDA "
                      "tensors; decomposed into thunder prims), called with func.call; options "
                      "policy=auto (regions a cost model finds faster) or always, executors=linalg,cuda")(
            fuse.fuse_module)

    if "thunder-decompose" not in PASSES:
        register_pass("thunder-decompose", "Replace ltorch ops by their decompositions into thunder prims")(
            lambda module_op: decompose.decompose_module(module_op))


def split_pipeline(pipeline: str):
    """The pass names (with options) inside `builtin.module(...)`, split at top-level commas."""
    text = pipeline.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        text = text[len("builtin.module("):-1]
    elif text.startswith("any(") and text.endswith(")"):
        text = text[len("any("):-1]
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def pass_name(element):
    return element.split("{")[0].split("(")[0].strip()


def build_pass_manager(pipeline: str, context=None):
    """A PassManager for the pipeline; raises ValueError for an unknown pass."""
    _load_passes()
    pm = passmanager.PassManager("builtin.module", context=context)
    for element in split_pipeline(pipeline):
        info = PASSES.get(pass_name(element))
        if info is not None:
            pm.add(_as_external(info, pass_options(element)), name=info.name, argument=info.name,
                   description=info.description)
        else:
            pm.add(element)
    return pm


def pass_options(element):
    """{key: value} of `name{key=value key2=value2}` (strings, as MLIR writes pass options)."""
    if "{" not in element:
        return {}
    body = element[element.index("{") + 1:element.rindex("}")]
    options = {}
    for item in body.split():
        key, _, value = item.partition("=")
        options[key.replace("-", "_")] = value
    return options


def _as_external(info, options=None):
    def run(op, pass_):
        try:
            info.run(op, **(options or {}))
        except Exception as e:  # report as a pass failure with the reason, like an MLIR pass
            op.location.emit_error(f"{info.name}: {e}")
            pass_.signal_pass_failure()

    run.__name__ = info.name.replace("-", "_")
    return run


def run_pipeline(module, pipeline: str):
    with module.context:
        build_pass_manager(pipeline).run(module.operation)


def list_passes():
    _load_passes()
    return dict((n, p.description) for n, p in sorted(PASSES.items()))
