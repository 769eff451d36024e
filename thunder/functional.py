"""thunder.functional.jit: the strict jit. Inputs are only tensors, numbers, strings, None,
dtypes, devices, slices, torch.Size and nested tuples/lists/dicts of those (anything else raises
ValueError "Cannot unpack object of type ..."), and the function may not read tensors that are
not inputs."""
from thunder.runtime.jit import ThunderFunction
from thunder.runtime.options import make_compile_data


def jit(fn, /, *, executors=None, cache=None, sharp_edges=None, disable_torch_autograd=False,
        transforms=None, debug_options=None, **compile_options):
    cd = make_compile_data(fn, executors=executors, cache=cache, sharp_edges=sharp_edges,
                           disable_torch_autograd=disable_torch_autograd, transforms=transforms,
                           debug_options=debug_options, strict=True, **compile_options)
    return ThunderFunction(cd)
