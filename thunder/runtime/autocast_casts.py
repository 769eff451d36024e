"""Weight casts a program leaves to torch's autocast, so that they are made once per autocast region.

Eager's autocast casts a parameter (a float32 leaf that requires grad) to the region's dtype
once and reuses the cast until the outermost region exits: a decoding loop under one
`torch.autocast("cpu", torch.bfloat16)` casts each weight once, not once per token. A traced
program records the cast (`impl.to(w, torch.bfloat16)`, ops/autocast.py) and would make it on
every call. Where a cast of a program input to the ambient autocast dtype (the program is
compiled for that region: the guards pin it, runtime/compile.py) feeds only ops that autocast
runs in lower precision (its linear, matmul, ...; through detaches), the generated program passes the input itself
to those ops, which still run under the caller's region: torch's autocast makes the cast, from
its cache. Same op, same cast, same result; the cast is what eager's would be, reused as eager
reuses it. Only in a program compiled with grad mode off (a no_grad call: the guards pin grad
mode where a parameter requires grad), whose casts eager makes without autograd history too:
not in thunder-autograd's @forward, which runs with grad mode off where the caller's is on (a
cast cached there without history could reach the caller's own later uses of the weight in the
region, on a torch whose cache does not tell grad modes apart; torch 2.13's does), nor in @backward (it may run outside the region, as loss.backward() usually does).

Every other torch call of a program runs with autocast off (outside_autocast): the trace holds
the casts autocast makes, so autocast must not cast again what the trace says runs in float32."""
import torch

from thunder.dialects import attrs
from thunder.dialects.definitions import decode_op, expand
from thunder.dialects.mlir import ir
from thunder.ops import registry
from thunder.ops.autocast import LOWER_PRECISION


AUTOCAST_DEVICES = ("cpu", "cuda")


def outside_autocast(fn):
    """fn, run with torch's autocast off (restored after). A trace holds every cast autocast
    makes (ops/autocast.py; a torch call recorded in a region runs in a region of its own,
    ops/fallback.py), so a program's torch calls must not be cast again: a product the user
    computed with autocast disabled inside the region (a rotary embedding's float32
    frequencies) would run in bfloat16, unlike its trace. The ops reading a cast left to
    autocast turn it on around themselves (codegen)."""
    def run(*args):
        if not torch._C._is_any_autocast_enabled():
            return fn(*args)
        saved = [torch.is_autocast_enabled(d) for d in AUTOCAST_DEVICES]
        for d in AUTOCAST_DEVICES:
            torch.set_autocast_enabled(d, False)
        try:
            return fn(*args)
        finally:
            for d, enabled in zip(AUTOCAST_DEVICES, saved):
                torch.set_autocast_enabled(d, enabled)
    return run


def left_to_autocast(block):
    """{cast result: the program input it casts} for the casts a call's program (func
    @computation) compiled now leaves to autocast."""
    if torch.is_grad_enabled():
        return {}
    returned = {v for o in block.operations if o.operation.name == "func.return" for v in expand(o.operands)}
    found = {}
    for operation in block.operations:
        operation = operation.operation
        op = registry.OPS.get(operation.name)
        if op is None or op.name != "to" or len(operation.results) != 1:
            continue
        try:
            _, values = decode_op(operation, lambda v: v)
        except (NotImplementedError, ValueError):
            continue
        source, result = values["input"], operation.results[0]
        if not (isinstance(source, ir.Value) and isinstance(source.owner, ir.Block)) or result in returned:
            continue
        if values.get("copy") or values.get("memory_format") is not None or values.get("device") is not None:
            continue
        meta, out = attrs.tensor_meta(source.type), attrs.tensor_meta(result.type)
        device = meta[2].type
        if device not in LOWER_PRECISION or not torch.is_autocast_enabled(device):
            continue
        if meta[1] is not torch.float32 or out[1] is not torch.get_autocast_dtype(device):
            continue
        chain = _through_detach(result, LOWER_PRECISION[device])
        if chain is not None:
            found.update((v, source) for v in chain)
    return found


def _through_detach(value, ops):
    """[value and the detaches of it (the trace of a no_grad call records one after an op)]
    when every use of these is one of ops, else None."""
    chain, uses = [value], 0
    for u in value.uses:
        owner = getattr(u.owner, "operation", u.owner)
        op = registry.OPS.get(owner.name)
        if op is not None and op.name == "detach" and len(owner.results) == 1:
            rest = _through_detach(owner.results[0], ops)
            if rest is None:
                return None
            chain += rest
        elif op is None or op.name not in ops:
            return None
        uses += 1
    return chain if uses else None
