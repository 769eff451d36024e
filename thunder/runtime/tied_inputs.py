"""Tied inputs: one tensor the trace reads through two paths (a tied weight: GPT-2's
`transformer.wte.weight` is `lm_head.weight`) is one value of the trace.

The acquisition gives each path its own input (state.py reads by expression), so the program's
backward returned one gradient per path and torch's autograd summed them into the parameter's
`.grad`: for GPT-2's [50257, 512] weight a zero-filled embedding gradient, the head's weight
gradient and their sum, three passes over 103 MB. With the uses joined on the first input,
thunder-autograd sums the two gradients inside the backward, where thunder-fuse's
`edge_ops`/kernels see them (and `impl.index_add_into` adds an embedding gradient's rows to the
GEMM's result instead of a sum with zeros, lowering/index_add_into.py).

`tied(tensors, first_read, mutated)` finds the pairs; `join(module, pairs)` rewires the uses; the
prologue checks at each call that the paths still read one tensor (`s1 is not s0: MISS`), so a
model untied later compiles again. Only tensors read from state (parameters, buffers), none
updated in place by the program and none sharing storage with another input otherwise."""
from thunder.dialects.emit import find_func


def tied(tensors, read, mutated=()):
    """{j: i} for each index j among read (the indices of the tensors read from state) whose
    tensor is the tensor of an earlier index i among them (the first path that read it);
    mutated: indices updated in place (left out)."""
    first, pairs = {}, {}
    for k in sorted(set(read)):
        t = tensors[k]
        i = first.setdefault(id(t), k)
        if i != k and i not in mutated and k not in mutated:
            pairs[k] = i
    return pairs


def join(module, pairs):
    """Uses of the func's argument j go to argument i, for each j: i of pairs (j keeps no use)."""
    if not pairs:
        return
    args = list(find_func(module.operation, "computation").regions[0].blocks[0].arguments)
    for j, i in pairs.items():
        args[j].replace_all_uses_with(args[i])
