"""The comparison most behaviour tests make: a function jitted and eager on equal fresh inputs."""
import torch

import thunder


def matches_eager(fn, make_args, jitted=None, **jit_options):
    """fn on fresh inputs from make_args(), eagerly and jitted (jitted, else thunder.jit(fn,
    **jit_options)): equal results and equal tensor inputs after (in-place updates). Returns the
    jitted function."""
    jf = jitted or thunder.jit(fn, **jit_options)
    eager_args, jit_args = make_args(), make_args()
    expected = fn(*eager_args)
    actual = jf(*jit_args)
    torch.testing.assert_close(actual, expected)
    for a, e in zip(jit_args, eager_args):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e)
    return jf
