"""Rewrites of a call's program that records no autograd history when it runs (codegen's
grad_free), made on its module before code generation, which prints what they leave:

- casts of inputs left to torch's autocast (runtime/autocast_casts.py): each such cast and the
  detaches of it get the attribute codegen.PASS_OPERAND, so their uses read the input (which
  autocast casts, once per region);
- in-place updates of inputs (runtime/reinplace.py): each op that runs in place gets the
  attribute reinplace.IN_PLACE (which operand it updates), the func reinplace.UPDATED_IN_PLACE
  (the inputs whose copy back is left out).

Both only in func @computation of a call's program (not thunder-autograd's @forward/@backward)."""
from thunder.dialects.emit import find_func
from thunder.dialects.mlir import ir
from thunder.runtime import reinplace
from thunder.runtime.autocast_casts import left_to_autocast
# (codegen's tracker of what may share memory with a value, which re-inplacing consults)
from thunder.runtime.codegen import _fusion_callees, _GradLeaves, PASS_OPERAND


def drop_no_grad_updates(module, fn_name="computation"):
    """`ltorch.no_grad_update(input, value)` is value in a program that records no history (it
    only tells thunder-autograd that input keeps its history): left out before fusion, so a chain
    of updates made under no_grad (an optimizer's step) fuses into one region."""
    with module.context:
        f = find_func(module.operation, fn_name)
        for o in list(f.regions[0].blocks[0].operations):
            if o.operation.name == "ltorch.no_grad_update":
                o.results[0].replace_all_uses_with(o.operands[1])
                o.operation.erase()


def rewrite_grad_free(module, fn_name="computation"):
    """Both rewrites of func @fn_name of module, in place (re-inplacing planned first, on the
    program as traced)."""
    with module.context:
        f = find_func(module.operation, fn_name)
        callees = _fusion_callees(module)
        plan = reinplace.plan(f, lambda values: _GradLeaves(values, callees))
        reinplace.mark(f, plan)
        for result in left_to_autocast(f.regions[0].blocks[0]):  # (the module still verifies: types unchanged)
            result.owner.operation.attributes[PASS_OPERAND] = ir.UnitAttr.get()
