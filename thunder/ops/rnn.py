"""Recurrent layers: torch.lstm, what nn.LSTM calls with its flat weights.

The op runs torch's fused LSTM; its decomposition unrolls the cell over time in registered ops
(one input projection per layer and direction, then per step a matmul with the hidden state and
the gate math), so thunder-autograd differentiates it through their VJP rules and the gate math
can fuse. Packed sequences (torch.lstm's batch_sizes overload) run as torch's call."""
import torch

from thunder.core.proxies import TensorProxy
from thunder.ops.registry import Bool, Float, Int, OpDef, Tensor, Tensors, ltorch
from thunder.ops.elementwise import add, mul, sigmoid, tanh
from thunder.ops.nn import dropout as dropout_op, linear
from thunder.ops.join_split import cat, chunk, stack
from thunder.ops.shape import transpose


def _layout(input, hx, params, has_biases, num_layers, bidirectional, batch_first):
    """(directions, tensors per layer and direction, whether there is a projection, hidden size,
    output size, sequence length, batch size), with torch's checks."""
    dirs = 2 if bidirectional else 1
    if len(hx) != 2:
        raise RuntimeError(f"lstm expects two hidden states, got {len(hx)}")
    if num_layers < 1 or len(params) % (num_layers * dirs):
        raise RuntimeError(f"lstm: got {len(params)} parameters for {num_layers} layers and {dirs} directions")
    per = len(params) // (num_layers * dirs)
    proj = per - (4 if has_biases else 2)
    if proj not in (0, 1):
        raise RuntimeError(f"lstm: {per} parameters per layer and direction do not fit has_biases={has_biases}")
    if input.ndim != 3:
        raise RuntimeError(f"lstm: expected a 3-D input (unbatched inputs are batched by nn.LSTM), got "
                           f"{input.ndim}-D")
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    h0, c0 = hx
    hidden, out = c0.shape[-1], h0.shape[-1]
    for name, h, size in (("h0", h0, out), ("c0", c0, hidden)):
        if tuple(h.shape) != (num_layers * dirs, batch, size):
            raise RuntimeError(f"Expected hidden size {(num_layers * dirs, batch, size)}, got {list(h.shape)}"
                               if name == "h0" else
                               f"Expected hidden[1] size {(num_layers * dirs, batch, size)}, got {list(h.shape)}")
    return dirs, per, bool(proj), hidden, out, steps, batch


class _LSTMOp(OpDef):
    def __call__(self, input, hx, *args, **kwargs):
        if isinstance(hx, TensorProxy):  # lstm(data, batch_sizes, hx, ...): a PackedSequence
            # (torch's kernel reads the batch sizes: its call, core/meta_eval.py's _packed_rnn)
            raise NotImplementedError("thunder: nn.LSTM of a PackedSequence runs as torch's call")
        return super().__call__(input, hx, *args, **kwargs)


@ltorch("torch.lstm", aliases=(torch.lstm,), returns_sequence=True, random=True)
def lstm(input: Tensor, hx: Tensors, params: Tensors, has_biases: Bool, num_layers: Int, dropout: Float,
         train: Bool, bidirectional: Bool, batch_first: Bool):
    """(output, h_n, c_n) of a multi-layer LSTM; params per layer and direction: w_ih, w_hh,
    b_ih, b_hh (has_biases), w_hr (a projection). Random: dropout between layers in training."""
    dirs, _, _, hidden, out, steps, batch = _layout(input, hx, params, has_biases, num_layers, bidirectional,
                                                     batch_first)
    shape = (batch, steps, dirs * out) if batch_first else (steps, batch, dirs * out)
    return (TensorProxy(shape, input.dtype, input.device),
            TensorProxy((num_layers * dirs, batch, out), input.dtype, input.device),
            TensorProxy((num_layers * dirs, batch, hidden), input.dtype, input.device))


lstm.__class__ = _LSTMOp


@lstm.decompose
def _(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    dirs, per, proj, _, _, steps, _ = _layout(input, hx, params, has_biases, num_layers, bidirectional, batch_first)
    x = transpose(input, 0, 1) if batch_first else input  # (steps, batch, features)
    h_n, c_n = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            w = params[k * per:(k + 1) * per]
            w_ih, w_hh = w[0], w[1]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
            xw = linear(x, w_ih, b_ih)  # the input's share of the gates, all steps at once
            h, c = hx[0][k], hx[1][k]
            hs = [None] * steps
            for t in (range(steps) if d == 0 else reversed(range(steps))):
                i, f, g, o = chunk(add(xw[t], linear(h, w_hh, b_hh)), 4, 1)
                c = add(mul(sigmoid(f), c), mul(sigmoid(i), tanh(g)))
                h = mul(sigmoid(o), tanh(c))
                if proj:
                    h = linear(h, w[-1])
                hs[t] = h
            outs.append(stack(hs))
            h_n.append(h)
            c_n.append(c)
        x = cat(outs, -1) if dirs == 2 else outs[0]
        if dropout > 0 and train and layer < num_layers - 1:
            x = dropout_op(x, dropout)
    return (transpose(x, 0, 1) if batch_first else x), stack(h_n), stack(c_n)
