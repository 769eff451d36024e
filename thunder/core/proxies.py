"""Proxies: what the interpreter passes around in place of tensors while it records a trace."""
import functools
import math
import types
import warnings

import torch

from thunder.core import dispatch
from thunder.core import trace as tracing
from thunder.core.numbers import PYTHON_TYPES, NumberProxy, concrete
from thunder.core.symbols import SymInt
from thunder.core.trace import DataDependentError, where  # noqa: F401  (users import them from here)


def data_dependent(what, workaround):
    """Raise DataDependentError for an op whose result's shape depends on tensor values."""
    raise DataDependentError(f"thunder: {what}{where()} has a result whose shape depends on tensor values, "
                             f"which are not known while tracing. Workaround: {workaround}")


class TensorProxy:
    """Stands for a tensor: it knows shape, dtype, device and requires_grad, not values."""

    __slots__ = ("name", "shape", "dtype", "device", "requires_grad", "is_view", "is_input",
                 "input_name", "base", "recipe", "views", "meta", "stride_deps", "leaf", "inference",
                 "is_parameter", "no_grad_view", "__weakref__")

    # as torch.Tensor's: numpy's operators defer to the proxy's (np.int64(3) + x is x.__radd__)
    __array_priority__ = 1000

    def __init__(self, shape, dtype, device, requires_grad=False, name=None):
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self.device = device if isinstance(device, torch.device) else torch.device(device)
        self.requires_grad = requires_grad
        self.name = name if name is not None else tracing.new_name()
        self.is_view = False  # set by a meta function whose result aliases its input (record_op links them)
        self.is_input = False
        self.input_name = None  # for inputs: the name of the input it was created for
        self.base = None  # for views: the proxy this one is a view of
        self.recipe = None  # for views: (op, args, result index) that made it from its base
        self.views = []  # views taken of this proxy (regenerated when it is updated in place)
        tracing.track(self)
        # eager's strides: a meta tensor made by torch's own kernels (record_op); None: contiguous
        self.meta = None
        self.stride_deps = frozenset()  # names of the inputs whose strides decide this one's
        self.inference = False  # made under torch.inference_mode(): returned as an inference tensor
        # True: a view made under torch.no_grad() of a tensor that requires grad: requires grad as in
        # eager, sends no gradient, may not be updated in place with grad mode on (ops/record.py);
        # MODIFIED: such a view after an in-place update of it or of its base (eager then raises
        # where it is used with grad mode on)
        self.no_grad_view = False
        self.is_parameter = False  # stands for an nn.Parameter (isinstance(p, nn.Parameter) is True)
        self.leaf = True  # for inputs: whether the tensor is a leaf of autograd's graph

    __hash__ = object.__hash__

    @classmethod
    def like(cls, t, *, shape=None, dtype=None, device=None):
        return cls(t.shape if shape is None else shape, t.dtype if dtype is None else dtype,
                   t.device if device is None else device)

    def __repr__(self):
        dims = ", ".join(str(d) for d in self.shape)
        return f"<TensorProxy {self.name}: {self.device.type} {self.dtype} [{dims}]>"

    # --- metadata, answered without recording anything
    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)

    ndimension = dim

    def size(self, dim=None):
        if dim is None:
            return self.shape
        return self.shape[dim]

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    nelement = numel

    def element_size(self):
        return self.dtype.itemsize

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def is_complex(self):
        return self.dtype.is_complex

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    @property
    def is_cpu(self):
        return self.device.type == "cpu"

    @property
    def layout(self):
        return torch.strided

    # --- strides: answered with eager's (the trace then depends on the inputs' strides)
    def stride(self, dim=None):
        tracing.strides_decide(self)
        s = meta_of(self).stride()
        return s if dim is None else s[dim]

    def is_contiguous(self, memory_format=torch.contiguous_format):
        tracing.strides_decide(self)
        return meta_of(self).is_contiguous(memory_format=memory_format)

    # tensor kinds thunder's proxies never are
    is_nested = is_sparse = is_quantized = is_meta = is_mkldnn = is_sparse_csr = False
    grad_fn = None

    @property
    def is_leaf(self):
        # (eager: a tensor without history; an input that requires grad: as the tensor was)
        if self.is_input:
            return self.leaf or not self.requires_grad
        return not self.requires_grad or self.no_grad_view or id(self) in _made_leaves()

    @property
    def grad(self):
        return _read_grad(self)

    @grad.setter
    def grad(self, value):
        _write_grad(self, value)

    @grad.deleter
    def grad(self):
        _write_grad(self, None)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """loss.backward() inside the jitted function: its gradients recorded in the trace and
        accumulated into the .grad of the leaves (runtime/inner_autograd.py)."""
        return _inner_autograd("backward").backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    @property
    def T(self):
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        # as eager: the identity on a 0-d tensor, an error on a 1-d one
        if self.ndim == 1:
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor.")
        return self if self.ndim == 0 else self.transpose(-2, -1)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter([self[i] for i in range(self.shape[0])])

    # --- values. item() and tolist() give runtime numbers (core/numbers.py), which the program
    # computes on every call; where Python needs a value (bool(), int(), __index__, numpy()), it is
    # read while tracing and the trace specialized on it: a split (runtime/reads.py)
    def item(self):
        n = dispatch.OPS["ltorch.item"](self)
        n.expr = f"{self.name}.item()"
        return n

    def _scalar(self, to):
        """The single element as a runtime number of Python type `to` (ValueError as eager's
        int()/float() for more elements)."""
        if self.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        n = self.item()
        out = n._unary(to.__name__) if n.python_type is not to else n
        out.expr = self.name
        return out

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return self._scalar(bool).concrete("bool()")

    def __int__(self):
        return self._scalar(int).concrete("int()")

    def __float__(self):
        return self._scalar(float).concrete("float()")

    def __index__(self):
        if self.numel() != 1 or self.dtype.is_floating_point or self.dtype.is_complex:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return self._scalar(int).concrete("__index__()")

    def tolist(self):
        if self.ndim == 0:
            return self.item()
        if self.numel() == 0:
            return _nest([], self.shape)
        flat = list(dispatch.OPS["ltorch.tolist"](self))
        for i, n in enumerate(flat):
            n.expr = f"{self.name}.tolist()[{i}]"
        return _nest(flat, self.shape)

    def numpy(self, *, force=False):
        import numpy  # optional: only x.numpy() needs it

        return numpy.array(concrete(self.tolist(), "numpy()"), dtype=torch.empty((), dtype=self.dtype).numpy().dtype)

    def requires_grad_(self, requires_grad=True):
        """A no-op where the tensor already is as asked (Hugging Face's enable_input_require_grads
        hook on an embedding's result), and only a flag under grad mode off, where no op after it
        records history (that hook in an evaluation loop under torch.no_grad()). A tensor the
        function computed without history becomes a leaf that requires grad, as in eager (a
        gradient penalty's interpolated samples, differentiated with torch.autograd.grad):
        ops on it record history; it may not be returned (its .grad, which eager's backward
        would fill, is not kept). Changing an input's flag is eager autograd state (refused)."""
        requires_grad = bool(requires_grad)
        if requires_grad == self.requires_grad:
            return self
        floating = self.dtype.is_floating_point or self.dtype.is_complex
        if requires_grad and not floating:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if requires_grad and not torch.is_grad_enabled():
            self.requires_grad = True
            return self
        if not self.is_input and self.base is None:
            made = _made_leaves()
            if requires_grad:  # (computed without history, as it does not require grad: a leaf)
                made[id(self)] = (self, where())
            elif id(self) in made:
                del made[id(self)]
            else:
                raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to use a "
                                   "computed variable in a subgraph that doesn't require differentiation use "
                                   "var_no_grad = var.detach().")
            self.requires_grad = requires_grad
            return self
        raise NotImplementedError(f"thunder: torch.Tensor.requires_grad_{where()} {_AUTOGRAD}")

    # --- torch-level calls
    def __getattr__(self, name):
        attr = getattr(torch.Tensor, name, None)
        op = dispatch.METHODS.get(name)
        if op is not None:
            return functools.partial(dispatch.fallback_registered, op, attr, self)
        if name in _INPLACE_ONLY:
            return functools.partial(inplace, _INPLACE_ONLY[name], name, self)
        if name.endswith("_") and not name.startswith("_") and name[:-1] in dispatch.METHODS:
            update = functools.partial(inplace, dispatch.METHODS[name[:-1]], name)
            return functools.partial(dispatch.fallback_registered, update, attr, self)
        if name in _NOT_TRACED:
            raise NotImplementedError(f"thunder: torch.Tensor.{name}{where()} {_NOT_TRACED[name]}")
        if attr is None or name.startswith("__"):
            raise AttributeError(f"'Tensor' object has no attribute '{name}'")
        if isinstance(attr, types.GetSetDescriptorType):  # a property: x.real, x.imag, x.data
            return dispatch.fallback_call(attr.__get__, self)
        if isinstance(attr, property):
            return dispatch.fallback_call(attr.fget, self)
        return functools.partial(dispatch.fallback_call, attr, self)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # torch functions called with proxies from code the interpreter runs natively
        if func in _METADATA and args and isinstance(args[0], TensorProxy):
            return _METADATA[func](args[0])
        return dispatch.fallback_dispatch(func, *args, **(kwargs or {}))


def _nest(flat, shape):
    """flat (row-major) as nested lists of shape, as Tensor.tolist gives them."""
    if len(shape) <= 1:
        return list(flat)
    n = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * n:(i + 1) * n], shape[1:]) for i in range(shape[0])]
# torch functions that read only metadata: answered by the proxy, nothing is recorded
_METADATA = {torch.is_floating_point: TensorProxy.is_floating_point, torch.is_complex: TensorProxy.is_complex,
             torch.numel: TensorProxy.numel}


# Tensor attributes whose answer is not part of a trace: memory layout beyond strides (stride()
# and is_contiguous() are answered above) and the autograd state of real tensors
_STRIDES = ("depends on the memory layout, which thunder does not trace beyond strides. "
            "Workaround: use stride() / is_contiguous(), or call .contiguous() where needed.")
_MEMORY = "is about the tensor's memory, which a trace does not have. Workaround: run it outside the jitted function."
_AUTOGRAD = ("is about eager autograd state, which a trace does not have. Workaround: call it outside the jitted "
             "function (thunder.jit's result supports .backward(), hooks and .grad as eager does).")
_NOT_TRACED = {
    "storage_offset": _STRIDES, "dim_order": _STRIDES,
    "data_ptr": _MEMORY, "untyped_storage": _MEMORY, "storage": _MEMORY, "is_pinned": _MEMORY,
    "is_shared": _MEMORY, "is_set_to": _MEMORY, "share_memory_": _MEMORY, "pin_memory": _MEMORY,
    "record_stream": _MEMORY, "register_hook": _AUTOGRAD,
    "retain_grad": _AUTOGRAD, "register_post_accumulate_grad_hook": _AUTOGRAD,
}


def _made_leaves():
    """The trace's results made leaves by requires_grad_() (id -> (proxy, where)), {} outside a trace."""
    ctx = tracing.current()
    return ctx.made_leaves if ctx is not None else {}


def _read_grad(p):
    """x.grad while tracing: for a tensor the trace reads (argument, parameter), its .grad at call
    time, an input of the trace (None is guarded); None for a tensor the trace computed, as eager
    answers for a result of ops."""
    reader = getattr(tracing.current(), "read_grad", None)
    if reader is None:
        raise NotImplementedError(f"thunder: torch.Tensor.grad{where()} {_AUTOGRAD}")
    return reader(p)


def _write_grad(p, value):
    """x.grad = value (None: an optimizer's zero_grad) while tracing: replayed on the tensor the
    proxy stands for (runtime/state.py write_grad)."""
    writer = getattr(tracing.current(), "write_grad", None)
    if writer is None:
        raise NotImplementedError(f"thunder: setting torch.Tensor.grad{where()} {_AUTOGRAD}")
    writer(p, value)


def _inner_autograd(what):
    """The trace's autograd inside the jitted function (runtime/inner_autograd.py), or eager's
    refusal where the caller traces without one."""
    autograd = getattr(tracing.current(), "autograd", None)
    if autograd is None:
        raise NotImplementedError(f"thunder: torch.Tensor.{what}{where()} {_AUTOGRAD}")
    return autograd


MODIFIED = "modified"  # TensorProxy.no_grad_view of a view made under no_grad, then updated in place
_NO_GRAD_VIEW_INPLACE = (
    " and is being modified inplace with grad mode enabled. Given that this use case is ambiguous and "
    "error-prone, it is forbidden. You can clarify your code by moving both the view and the inplace "
    "either both inside the no_grad block (if you don't want the inplace to be tracked) or both outside "
    "(if you want the inplace to be tracked).")


def check_inplace_allowed(self):
    """Eager's errors for an in-place update of a leaf that requires grad (or of a view of one) and,
    with grad mode on, of a view made under no_grad of a tensor that requires grad (or of a view
    of such a view)."""
    root = self
    while root.base is not None:
        if root.no_grad_view and tracing.grad_enabled():
            raise RuntimeError(("A view was created in no_grad mode" if root is self else
                                "A view of a view which was created in no_grad mode")
                               + _NO_GRAD_VIEW_INPLACE)
        root = root.base
    made = id(root) in _made_leaves()
    # (a detached view, x.data or x.detach(), requires no grad: eager updates it freely)
    if (root.is_input or made) and root.requires_grad and self.requires_grad and tracing.grad_enabled():
        if not root.leaf and not made:
            raise NotImplementedError(
                f"thunder: an in-place update{where()} of an input that requires grad and is not a leaf (the "
                "result of other ops) is not supported. Workaround: update a clone, or make the update "
                "outside the jitted function.")
        raise RuntimeError(("a view of a leaf Variable" if root is not self else "a leaf Variable")
                           + " that requires grad is being used in an in-place operation.")


def inplace(op, method_name, self, *args, **kwargs):
    """An in-place update, recorded functionally: the proxy then stands for the result. Like
    eager, the update reaches what the proxy is a view of (and on up to an input, whose final
    value the program copies back) and every other view of those tensors."""
    return update_inplace(self, lambda: op(self, *args, **kwargs), method_name, op)


def update_inplace(self, compute, method_name="an in-place update", op=None, resizes=False):
    """self updated in place with compute() (which records the functional op): see inplace.
    resizes: self takes the result's shape (an out= tensor eager resizes: write_out)."""
    check_inplace_allowed(self)
    out = compute()
    if out.dtype != self.dtype:
        if not torch.can_cast(out.dtype, self.dtype):
            raise RuntimeError(f"result type {_dtype_name(out.dtype)} can't be cast to the desired output "
                               f"type {_dtype_name(self.dtype)}")
        out = out.to(self.dtype)
    if out.shape != self.shape and not resizes:
        if getattr(op, "is_view", False):  # x.unsqueeze_(0), x.t_(): the fallback records torch's own call
            raise NotImplementedError(f"thunder: {method_name} changes the shape of a tensor in place")
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(out.shape)}")
    assign(self, out)
    _mark_no_grad_views_modified(self)
    return self


def _mark_no_grad_views_modified(proxy):
    """After an in-place update of proxy: the views made under no_grad of the tensor it shares
    memory with are modified (eager: their version differs from their creation's)."""
    root = proxy
    while root.base is not None:
        root = root.base
    todo = [root]
    while todo:
        p = todo.pop()
        if p.no_grad_view:
            p.no_grad_view = MODIFIED
        todo.extend(p.views)


def check_no_grad_view_use(p):
    """Eager's error for the use with grad mode on of a view made under no_grad after it or its
    base was updated in place."""
    if p.no_grad_view == MODIFIED:
        raise RuntimeError("A view was created in no_grad mode and its base or another view of its base has "
                           "been modified inplace with grad mode enabled. Given that this use case is ambiguous "
                           "and error-prone, it is forbidden. You can clarify your code by moving both the view "
                           "and the inplace either both inside the no_grad block (if you don't want the inplace "
                           "to be tracked) or both outside (if you want the inplace to be tracked).")


def write_out(name, out, result):
    """`out=` arguments of the call `name`: the result is written into out (an in-place update of out)."""
    outs, results = (out, result) if isinstance(out, (tuple, list)) else ((out,), (result,))
    for o, r in zip(outs, results):
        if not isinstance(o, TensorProxy):
            raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(o).__name__}")
        resize = o.shape != r.shape
        if resize:
            _check_resizable(name, o, r)
        update_inplace(o, lambda r=r: r, f"{name}(out=)", resizes=resize)
    return out


def _check_resizable(name, o, r):
    """Eager resizes an out= tensor of another shape (warning where it had elements). Here that
    is a tensor the function made, with no views: nothing else holds its old shape, so it
    stands for the result from then on. An input's or a view's resize is refused."""
    if o.input_name is not None or o.base is not None or o.views:
        what = ("an input of the function" if o.input_name is not None else
                "a view" if o.base is not None else "a tensor that has views")
        raise NotImplementedError(f"thunder: {name}(out=...){where()} with an out tensor of shape {list(o.shape)} "
                                  f"for a result of shape {list(r.shape)} (eager resizes it) is not supported where "
                                  f"out is {what}. Workaround: use the result instead of out=.")
    if math.prod(o.shape):  # (eager's warning, at the user's line)
        loc = tracing.current_location() or ("<thunder>", 0)
        warnings.warn_explicit(
            f"An output with one or more elements was resized since it had shape {list(o.shape)}, which does not "
            f"match the required output shape {list(r.shape)}. This behavior is deprecated, and in a future PyTorch "
            "release outputs will not be resized unless they have zero elements. You can explicitly reuse an out "
            "tensor t by resizing it, inplace, to zero elements with t.resize_(0).", UserWarning, *loc)


def _dtype_name(dtype):
    return {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long", torch.int32: "Int",
            torch.bool: "Bool", torch.float16: "Half", torch.bfloat16: "BFloat16"}.get(dtype, str(dtype))


def assign(proxy, value):
    """proxy now holds value: its bases are updated through their unview rules, and the other
    views of every updated tensor are regenerated from it."""
    tracing.rebind(proxy, value)
    child = proxy
    while child.base is not None:
        base = child.base
        op, args, index = child.recipe
        rule = op.unview_rule or _same_memory_unview(op)
        tracing.rebind(base, rule(base, child, index, **{k: v for k, v in args.items() if v is not base}))
        _regenerate_views(base, skip=child)
        child = base
    _regenerate_views(proxy, skip=None)


def _same_memory_unview(op):
    def rule(base, value, index, **args):
        if value.shape == base.shape and value.dtype == base.dtype:
            return value  # the view is the same tensor (detach, contiguous, a no-op to())
        raise NotImplementedError(f"thunder: an in-place update of the result of {op.torch_name}{where()} "
                                  "cannot reach its base yet. Workaround: use out-of-place ops.")
    return rule


def _regenerate_views(proxy, skip):
    for w in list(proxy.views):
        if w is skip:
            continue
        op, args, index = w.recipe
        new = op(**{k: (proxy if v is proxy else v) for k, v in args.items()})
        new = new[index] if isinstance(new, tuple) else new
        proxy.views = [v for v in proxy.views if v is not new]  # (identity: == records an op)
        tracing.rebind(w, new)
        _regenerate_views(w, skip=None)


def _zero(self):
    return dispatch.OPS["ltorch.zeros_like"](self)


def _fill(self, value):
    if isinstance(value, TensorProxy):
        return value.to(self.dtype).expand(self.shape)
    return dispatch.OPS["ltorch.full_like"](self, value)


def _copy(self, src, non_blocking=False):
    if not isinstance(src, TensorProxy):
        raise TypeError("copy_(): argument 'src' must be Tensor")
    return src.to(self.dtype).expand(self.shape)


# in-place methods without an out-of-place op of the same name
_INPLACE_ONLY = {"zero_": _zero, "fill_": _fill, "copy_": _copy}


def _dunder(name):
    def method(self, *args):
        op = dispatch.DUNDERS.get(name)
        if op is None:  # torch's own operator, through the fallback
            return dispatch.fallback_call(getattr(torch.Tensor, name), self, *args)
        # reflected operators too are called with the proxy first: their ops take it so
        return dispatch.fallback_registered(op, getattr(torch.Tensor, name), self, *args)

    method.__name__ = name
    return method


_OPERATORS = [
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
    "lshift", "rshift",
]
for _n in _OPERATORS:
    setattr(TensorProxy, f"__{_n}__", _dunder(f"__{_n}__"))
    setattr(TensorProxy, f"__r{_n}__", _dunder(f"__r{_n}__"))
for _n in ["eq", "ne", "lt", "le", "gt", "ge", "neg", "pos", "abs", "invert", "getitem", "reversed", "contains"]:
    setattr(TensorProxy, f"__{_n}__", _dunder(f"__{_n}__"))  # (reversed(x) is x.flip(0), as in eager)


def _invert(self):
    # eager's ~ checks the dtype itself (TypeError) before bitwise_not would (NotImplementedError)
    if self.dtype.is_floating_point or self.dtype.is_complex:
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    return _dunder("__invert__")(self)


TensorProxy.__invert__ = _invert


def _setitem(self, key, value):
    update = functools.partial(inplace, dispatch.OPS["ltorch.setitem"], "__setitem__")
    return dispatch.fallback_registered(update, torch.Tensor.__setitem__, self, key, value)


TensorProxy.__setitem__ = _setitem


def _inplace_dunder(name):
    def method(self, other):
        return inplace(dispatch.DUNDERS[f"__{name}__"], f"__i{name}__", self, other)

    return method


for _n in _OPERATORS:
    setattr(TensorProxy, f"__i{_n}__", _inplace_dunder(_n))


def proxy_of_meta(shape, dtype, device, name=None):
    """A proxy for a value of this metadata (a trace's Ref, an MLIR type): a TensorProxy, or for
    device None a NumberProxy (a runtime number)."""
    if device is None:
        return NumberProxy(PYTHON_TYPES[dtype], name=name)
    return TensorProxy(shape, dtype, device, name=name)


def proxy_for(t: torch.Tensor, name=None, *, input=True):
    ctx = tracing.current()
    shape = t.shape
    symbolic = getattr(ctx, "sym_shapes", None)
    if symbolic and input and id(t) in symbolic:  # cache="symbolic values": SymInt dims (core/symbols.py)
        shape = [d if s is None else SymInt(d, s) for d, s in zip(t.shape, symbolic[id(t)])]
    p = TensorProxy(shape, t.dtype, t.device, t.requires_grad, name=name)
    p.is_input = input
    p.input_name = p.name if input else None
    p.meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    p.stride_deps = frozenset((p.name,)) if input else frozenset()
    p.leaf = t.is_leaf
    p.is_parameter = isinstance(t, torch.nn.Parameter)
    if ctx is not None and t.requires_grad:
        ctx.differentiable = True
    return p


def to_refs(v):
    """A recorded call's value: proxies as their Refs (core/trace.py), tensor lists as tuples of them."""
    if isinstance(v, (TensorProxy, NumberProxy)):
        return tracing.ref(v)
    if isinstance(v, tuple) and any(isinstance(x, TensorProxy) for x in v):
        return tuple(to_refs(x) for x in v)
    return v


def meta_of(p):
    """A meta tensor with p's shape, dtype and eager's strides (contiguous when unknown)."""
    if strided_meta(p) is None:
        p.meta = torch.empty(p.shape, dtype=p.dtype, device="meta")
    return p.meta


def strided_meta(p):
    """p's meta tensor where one holds its strides, else None: p is contiguous (ops that only
    ask whether it is laid out otherwise make none: at a symbolic rule's made-up sizes, e.g.
    three dims of 10^7, its storage size would overflow)."""
    m = p.meta
    return None if m is None or m.shape != p.shape or m.dtype != p.dtype else m
