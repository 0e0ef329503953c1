"""Random small models for ptec's differential model fuzzer.

A model is a *description* (JSON-able dict): its inputs (shape, dtype) and a
list of layers, each naming an operator kind, the ids of the values it reads
(inputs are values 0..k-1, layer j's result is value k+j) and its
parameters, plus the ids of the outputs.  `build(desc)` turns a description
into an `nn.Module`; `generate(seed, index, attempt)` draws one from the
grammar below.  Everything is deterministic: the grammar draws from
`random.Random(f"{seed}:{index}:{attempt}")`, each layer's weights from
`torch.manual_seed(layer["seed"])`, the test inputs from the model's own
input seed.

Layers are drawn by running them: a proposed layer is built and applied to
example inputs, and kept only if it runs and its result is small (at most
MAX_NUMEL elements), finite and moderate in magnitude.  Operators whose
result jumps on a tiny change of their operand (float -> int casts,
comparisons, argmax, floor/round) only read *exact* values (inputs, and what
data movement, exact casts and integer arithmetic make of them), so that
PyTorch and ptec, which may sum in a different order, cannot land on
different sides of a step.
"""

from __future__ import annotations

import copy
import json
import math
import random

import torch
import torch.nn.functional as F
from torch import nn

MAX_NUMEL = 4096
MAX_ABS = 1e4

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "int64": torch.int64,
    "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class Cfg:
    """The dtype 'float' means in `forward`: float32 when exported, float64
    for the reference run that sizes the tolerances."""

    fdt = torch.float32


def fdt():
    return Cfg.fdt


def is_float(t):
    return t.dtype.is_floating_point


def is_f32(t):
    # A float value of the model's working dtype (float32 when exported).
    return t.dtype == fdt()


# --------------------------------------------------------------------------
# the operators
# --------------------------------------------------------------------------

OPS = {}


def op(name, weight=1.0, exact=False, needs_exact=False):
    """Registers an operator kind. `propose(st, rng)` returns (inputs, params)
    or None; `make(p, xs)` returns a callable module, built from the actual
    inputs `xs` (so that shrinking may change the shapes it sees).
    `exact`: the result is exact when all its inputs are (data movement);
    `needs_exact`: its float inputs must be exact (a step function)."""

    def reg(cls):
        if not hasattr(cls, "make"):
            cls.make = lambda self, p, xs: self.module(p, xs)
        if not hasattr(cls, "requires_exact"):
            cls.requires_exact = lambda self, p: self.needs_exact
        cls.name = name
        cls.weight = weight
        cls.exact = exact
        cls.needs_exact = needs_exact
        OPS[name] = cls()
        return cls

    return reg


class Layer(nn.Module):
    """A layer whose behaviour its parameters `p` say."""

    def __init__(self, p, xs=None):
        super().__init__()
        self.p = p


class Fn(nn.Module):
    """A parameterless layer: `f(*xs)`."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


class State:
    def __init__(self, vals, exact, flavour):
        self.flavour = flavour
        self.vals = vals  # example tensors, by id
        self.exact = exact  # per id
        self.n_inputs = len(vals)

    def pick(self, rng, pred=lambda t: True, exact=False):
        """A value id satisfying `pred` (and exact, if asked): mostly the
        newest, else any."""
        ids = [i for i, t in enumerate(self.vals) if pred(t) and (self.exact[i] or not exact)]
        if not ids:
            return None
        # The newest layer's result, or the primary input before any.
        newest = len(self.vals) - 1 if len(self.vals) > self.n_inputs else 0
        if newest in ids and rng.random() < 0.8:
            return newest
        return rng.choice(ids)


def rand_dim(rng, t):
    return rng.randrange(t.dim()) if t.dim() else None


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def seeded_init(seed):
    torch.manual_seed(seed)


# ---- convolutions --------------------------------------------------------


@op("conv", weight=5.0)
class Conv:
    def propose(self, st, rng):
        nd = rng.choice([1, 2, 2])
        x = st.pick(rng, lambda t: is_f32(t) and t.dim() == nd + 2 and t.shape[1] <= 32)
        if x is None:
            return None
        c = st.vals[x].shape[1]
        kind = rng.choices(["plain", "depthwise", "grouped", "pointwise"], [4, 3, 1, 2])[0]
        groups, out = 1, rng.choice([1, 2, 3, 4, 6, 8, 12, 16])
        if kind == "depthwise":
            groups, out = c, c * rng.choice([1, 1, 2])
        elif kind == "grouped":
            gs = [g for g in divisors(c) if 1 < g < c] or [1]
            groups = rng.choice(gs)
            out = groups * rng.choice([1, 2, 3])
        k = [1] * nd if kind == "pointwise" else [rng.choice([1, 2, 3, 3, 5]) for _ in range(nd)]
        if nd == 2 and rng.random() < 0.7:
            k = [k[0], k[0]]
        stride = [rng.choice([1, 1, 2, 3]) for _ in range(nd)]
        dilation = [rng.choice([1, 1, 1, 2]) for _ in range(nd)]
        if rng.random() < 0.15 and all(s == 1 for s in stride):
            padding = "same"
        else:
            padding = [rng.randint(0, max(0, kk // 2 + 1)) for kk in k]
        mode = rng.choices(["zeros", "reflect", "replicate", "circular"], [20, 1, 1, 1])[0]
        p = dict(
            nd=nd,
            out=out,
            k=k,
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
            bias=rng.random() < 0.7,
            mode=mode,
            transposed=kind in ("plain", "depthwise") and rng.random() < 0.1,
        )
        if p["transposed"]:
            p["mode"] = "zeros"
            p["padding"] = [min(pp, kk - 1) for pp, kk in zip(padding if padding != "same" else [0] * nd, k)]
            p["output_padding"] = [rng.randint(0, max(0, min(s, d) - 1)) for s, d in zip(stride, dilation)]
        return [x], p

    def make(self, p, xs):
        kw = dict(stride=p["stride"], padding=p["padding"], dilation=p["dilation"], groups=p["groups"], bias=p["bias"])
        if p["transposed"]:
            cls = nn.ConvTranspose1d if p["nd"] == 1 else nn.ConvTranspose2d
            kw["output_padding"] = p["output_padding"]
        else:
            cls = nn.Conv1d if p["nd"] == 1 else nn.Conv2d
            kw["padding_mode"] = p["mode"]
        return cls(xs[0].shape[1], p["out"], p["k"], **kw)


# ---- pooling ---------------------------------------------------------------


@op("pool", weight=2.0)
class Pool:
    def propose(self, st, rng):
        nd = rng.choice([1, 2, 2])
        x = st.pick(rng, lambda t: is_f32(t) and t.dim() == nd + 2)
        if x is None:
            return None
        kind = rng.choice(["max", "avg", "adaptive_avg", "adaptive_max"] if nd == 2 else ["max", "avg", "adaptive_avg"])
        k = rng.choice([1, 2, 2, 3])
        p = dict(nd=nd, kind=kind, k=k, stride=rng.choice([None, 1, 2, k]), padding=rng.randint(0, k // 2))
        p["ceil"] = rng.random() < 0.25
        p["dilation"] = rng.choice([1, 1, 2]) if kind == "max" else 1
        p["count_include_pad"] = rng.random() < 0.5
        spatial = list(st.vals[x].shape[2:])
        p["out"] = [rng.randint(1, max(1, s)) for s in spatial]
        if rng.random() < 0.4:
            p["out"] = [1] * nd
        return [x], p

    def make(self, p, xs):
        nd, kind = p["nd"], p["kind"]
        if kind == "max":
            f = F.max_pool1d if nd == 1 else F.max_pool2d
            return Fn(
                lambda x: f(x, p["k"], p["stride"], p["padding"], p["dilation"], ceil_mode=p["ceil"])
            )
        if kind == "avg":
            f = F.avg_pool1d if nd == 1 else F.avg_pool2d
            return Fn(
                lambda x: f(x, p["k"], p["stride"], p["padding"], p["ceil"], p["count_include_pad"])
            )
        if kind == "adaptive_avg":
            f = F.adaptive_avg_pool1d if nd == 1 else F.adaptive_avg_pool2d
            return Fn(lambda x: f(x, p["out"]))
        return Fn(lambda x: F.adaptive_max_pool2d(x, p["out"]))


# ---- linear algebra -------------------------------------------------------


@op("linear", weight=3.0)
class Linear:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: is_f32(t) and 1 <= t.dim() <= 4 and t.shape[-1] <= 256)
        if x is None:
            return None
        return [x], dict(out=rng.choice([1, 2, 4, 5, 8, 16, 24, 32]), bias=rng.random() < 0.8)

    def make(self, p, xs):
        return nn.Linear(xs[0].shape[-1], p["out"], bias=p["bias"])


class MatmulModule(Layer):
    def __init__(self, p, xs):
        super().__init__(p)
        if p["with"] == "weight":
            self.w = nn.Parameter(torch.randn(xs[0].shape[-1], p["m"]) / math.sqrt(xs[0].shape[-1]))

    def forward(self, x, *ys):
        kind = self.p["with"]
        if kind == "weight":
            return x @ self.w if self.p["fn"] == "matmul" else torch.mm(x, self.w)
        if kind == "self_t":
            y = x.transpose(-1, -2)
            return torch.bmm(x, y) if self.p["fn"] == "bmm" else torch.matmul(x, y)
        if kind == "t_self":
            y = x.transpose(-1, -2)
            return torch.bmm(y, x) if self.p["fn"] == "bmm" else torch.matmul(y, x)
        (y,) = ys
        if self.p["fn"] == "einsum":
            return torch.einsum("bij,bkj->bik", x, y)
        return torch.bmm(x, y) if self.p["fn"] == "bmm" else torch.matmul(x, y)


@op("matmul", weight=2.0)
class Matmul:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: is_f32(t) and 2 <= t.dim() <= 4)
        if x is None:
            return None
        t = st.vals[x]
        kind = rng.choice(["weight", "self_t", "t_self", "value"])
        fn = "matmul"
        if kind == "weight":
            if t.dim() == 2 and rng.random() < 0.5:
                fn = "mm"
            return [x], {"with": "weight", "m": rng.choice([1, 3, 4, 8, 16]), "fn": fn}
        if kind in ("self_t", "t_self"):
            if t.dim() == 3 and rng.random() < 0.5:
                fn = "bmm"
            return [x], {"with": kind, "fn": fn}
        # another value whose shape fits: [..., K, M] or the same shape (einsum)
        if t.dim() == 3 and rng.random() < 0.3:
            y = st.pick(rng, lambda u: is_f32(u) and u.dim() == 3 and u.shape[0] == t.shape[0] and u.shape[2] == t.shape[2])
            if y is not None:
                return [x, y], {"with": "value", "fn": "einsum"}
        y = st.pick(rng, lambda u: is_f32(u) and u.dim() >= 2 and u.shape[-2] == t.shape[-1])
        if y is None:
            return None
        u = st.vals[y]
        if t.dim() == 3 and u.dim() == 3 and u.shape[0] == t.shape[0] and rng.random() < 0.5:
            fn = "bmm"
        return [x, y], {"with": "value", "fn": fn}

    module = MatmulModule


# ---- normalisation ---------------------------------------------------------


def random_bn(bn):
    c = bn.num_features
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(c) * 0.5)
        bn.running_var.copy_(torch.rand(c) * 1.5 + 0.25)
        if bn.affine:
            bn.weight.copy_(torch.rand(c) + 0.5)
            bn.bias.copy_(torch.randn(c) * 0.3)
    return bn.eval()


@op("norm", weight=2.0)
class Norm:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: is_f32(t) and 2 <= t.dim() <= 4)
        if x is None:
            return None
        t = st.vals[x]
        kinds = ["layer", "layer", "group", "l2"]
        if t.dim() in (2, 3, 4):
            kinds += ["batch", "batch", "batch"]
        if t.dim() in (3, 4):
            kinds += ["instance"]
        kind = rng.choice(kinds)
        p = dict(kind=kind, affine=rng.random() < 0.8, eps=rng.choice([1e-5, 1e-3]))
        if kind == "layer":
            p["dims"] = rng.choice([1, 1, 2]) if t.dim() >= 3 else 1
            p["bias"] = rng.random() < 0.8
        if kind == "group":
            p["groups"] = rng.choice(divisors(t.shape[1]))
        if kind == "l2":
            p["dim"] = rng.randrange(t.dim())
        return [x], p

    def make(self, p, xs):
        x = xs[0]
        kind = p["kind"]
        if kind == "batch":
            cls = nn.BatchNorm2d if x.dim() == 4 else nn.BatchNorm1d
            return random_bn(cls(x.shape[1], eps=p["eps"], affine=p["affine"]))
        if kind == "instance":
            cls = nn.InstanceNorm2d if x.dim() == 4 else nn.InstanceNorm1d
            m = cls(x.shape[1], eps=p["eps"], affine=p["affine"])
            if p["affine"]:
                with torch.no_grad():
                    m.weight.copy_(torch.rand(x.shape[1]) + 0.5)
                    m.bias.copy_(torch.randn(x.shape[1]) * 0.3)
            return m
        if kind == "layer":
            m = nn.LayerNorm(list(x.shape[-p["dims"]:]), eps=p["eps"], elementwise_affine=p["affine"], bias=p["bias"])
            if p["affine"]:
                with torch.no_grad():
                    m.weight.copy_(torch.rand_like(m.weight) + 0.5)
                    if m.bias is not None:
                        m.bias.copy_(torch.randn_like(m.bias) * 0.3)
            return m
        if kind == "group":
            m = nn.GroupNorm(p["groups"], x.shape[1], eps=p["eps"], affine=p["affine"])
            if p["affine"]:
                with torch.no_grad():
                    m.weight.copy_(torch.rand_like(m.weight) + 0.5)
                    m.bias.copy_(torch.randn_like(m.bias) * 0.3)
            return m
        return Fn(lambda x: F.normalize(x, dim=p["dim"]))


# ---- attention -------------------------------------------------------------


class Mha(nn.Module):
    def __init__(self, p, xs):
        super().__init__()
        e = xs[0].shape[-1]
        kdim = xs[1].shape[-1] if len(xs) > 1 else None
        self.p = p
        self.attn = nn.MultiheadAttention(
            e, p["heads"], bias=p["bias"], batch_first=p["batch_first"], kdim=kdim, vdim=kdim
        )
        if p["causal"]:
            lq = xs[0].shape[1 if p["batch_first"] else 0]
            lk = xs[-1].shape[1 if p["batch_first"] else 0]
            self.register_buffer("mask", torch.triu(torch.full((lq, lk), float("-inf")), 1))
        else:
            self.mask = None

    def forward(self, x, *kv):
        k = kv[0] if kv else x
        out, _ = self.attn(x, k, k, need_weights=False, attn_mask=self.mask)
        return out


class Sdpa(Layer):
    def __init__(self, p, xs):
        super().__init__(p)
        if p["proj"]:
            e = xs[0].shape[-1]
            self.qkv = nn.Linear(e, 3 * e)
            self.out = nn.Linear(e, e)

    def forward(self, x):
        p = self.p
        if p["proj"]:
            b, t, e = x.shape
            h = p["heads"]
            q, k, v = self.qkv(x).split(e, dim=-1)
            q, k, v = (y.reshape(b, t, h, e // h).transpose(1, 2) for y in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"], scale=p["scale"])
            return self.out(y.transpose(1, 2).reshape(b, t, e))
        return F.scaled_dot_product_attention(x, x * 0.5, x, is_causal=p["causal"], scale=p["scale"])


@op("attention", weight=1.5)
class Attention:
    def propose(self, st, rng):
        kind = rng.choice(["mha", "mha", "sdpa_proj", "sdpa"])
        if kind == "sdpa":
            x = st.pick(rng, lambda t: is_f32(t) and t.dim() in (3, 4) and t.shape[-2] <= 32 and t.shape[-1] <= 64)
            if x is None:
                return None
            return [x], dict(kind=kind, proj=False, causal=rng.random() < 0.4, scale=rng.choice([None, 0.3]))
        x = st.pick(rng, lambda t: is_f32(t) and t.dim() == 3 and t.shape[-1] <= 64 and t.shape[1] <= 32)
        if x is None:
            return None
        e = st.vals[x].shape[-1]
        heads = rng.choice([h for h in (1, 2, 4) if e % h == 0])
        if kind == "sdpa_proj":
            return [x], dict(kind=kind, proj=True, heads=heads, causal=rng.random() < 0.4, scale=rng.choice([None, 0.3]))
        p = dict(kind=kind, heads=heads, bias=rng.random() < 0.8, batch_first=rng.random() < 0.7, causal=rng.random() < 0.3)
        ins = [x]
        if rng.random() < 0.3:
            t = st.vals[x]
            bdim = 0 if p["batch_first"] else 1
            y = st.pick(rng, lambda u: is_f32(u) and u.dim() == 3 and u.shape[bdim] == t.shape[bdim] and u.shape[-1] <= 64)
            if y is not None and y != x:
                ins.append(y)
        return ins, p

    def make(self, p, xs):
        if p["kind"] == "mha":
            return Mha(p, xs)
        return Sdpa(p, xs)


# ---- activations -----------------------------------------------------------

ACTS = {
    "relu": F.relu,
    "relu6": F.relu6,
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 1.5),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "elu": F.elu,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "softplus": F.softplus,
    "mish": F.mish,
    "clamp": lambda x: torch.clamp(x, -0.3, 0.8),
    "clamp_min": lambda x: torch.clamp(x, min=-0.2),
    "abs": torch.abs,
    "neg": torch.neg,
    "exp": lambda x: torch.exp(torch.clamp(x, max=5.0)),
    "log1p_abs": lambda x: torch.log(x.abs() + 1.0),
    "sqrt_abs": lambda x: torch.sqrt(x.abs() + 0.01),
    "rsqrt_abs": lambda x: torch.rsqrt(x.abs() + 0.5),
    "erf": torch.erf,
    "sin": torch.sin,
    "cos": torch.cos,
    "square": torch.square,
    "reciprocal": lambda x: torch.reciprocal(x.abs() + 0.5),
    "prelu": None,  # a module, see make
    "logsigmoid": F.logsigmoid,
    "softsign": F.softsign,
}
STEP_ACTS = {
    "floor": torch.floor,
    "ceil": torch.ceil,
    "round": torch.round,
    "sign": torch.sign,
    "trunc": torch.trunc,
}


@op("act", weight=3.0)
class Act:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: is_float(t))
        if x is None:
            return None
        names = sorted(ACTS)
        if st.flavour == "xnnpack":
            # ExecuTorch's XNNPACK partitioner takes gelu(approximate="tanh")
            # as XNNPACK's erf GELU: its own runtime differs from eager by
            # up to 5e-4 (see docs/model-fuzzing.md), so do not ask for it.
            names.remove("gelu_tanh")
        return [x], dict(f=rng.choice(names))

    def make(self, p, xs):
        if p["f"] == "prelu":
            c = xs[0].shape[1] if xs[0].dim() >= 2 else 1
            m = nn.PReLU(c)
            with torch.no_grad():
                m.weight.copy_(torch.rand(c) * 0.5)
            return m.to(xs[0].dtype)
        return Fn(ACTS[p["f"]])


@op("step", weight=0.5, exact=True, needs_exact=True)
class Step:
    def propose(self, st, rng):
        x = st.pick(rng, is_float, exact=True)
        if x is None:
            return None
        return [x], dict(f=rng.choice(sorted(STEP_ACTS)), scale=rng.choice([2.0, 4.0]))

    def make(self, p, xs):
        f, s = STEP_ACTS[p["f"]], p["scale"]
        # Scaling by a power of two is exact.
        return Fn(lambda x: f(x * s))


# ---- element-wise binary ---------------------------------------------------

BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "add_alpha", "rsub"]


def apply_binary(name, a, b):
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name == "mul":
        return a * b
    if name == "div":
        return a / (b.abs() + 0.5) if torch.is_tensor(b) else a / b
    if name == "maximum":
        return torch.maximum(a, b) if torch.is_tensor(b) else torch.clamp(a, min=b)
    if name == "minimum":
        return torch.minimum(a, b) if torch.is_tensor(b) else torch.clamp(a, max=b)
    if name == "add_alpha":
        return torch.add(a, b, alpha=0.5)
    if name == "rsub":
        return torch.rsub(a, b)
    if name == "remainder":
        return torch.remainder(a, b)
    if name == "floor_divide":
        return torch.floor_divide(a, b)
    raise ValueError(name)


def broadcast_shape(rng, shape):
    """A shape broadcastable to `shape`: some dims set to 1, some leading dims dropped."""
    s = [d if rng.random() < 0.5 else 1 for d in shape]
    drop = rng.randint(0, len(s))
    return s[drop:]


class BinaryModule(Layer):
    def __init__(self, p, xs):
        super().__init__(p)
        if p["with"] == "param":
            c = torch.randn(p["shape"]).to(xs[0].dtype) if is_float(xs[0]) else torch.randint(-3, 4, p["shape"])
            self.register_buffer("c", c)

    def forward(self, x, *ys):
        kind, name = self.p["with"], self.p["op"]
        if kind == "scalar":
            s = self.p["s"]
            return apply_binary(name, s, x) if self.p.get("swap") else apply_binary(name, x, s)
        if kind == "param":
            other = self.c
        elif kind == "self":
            other = x
        else:
            (other,) = ys
        if self.p.get("swap"):
            return apply_binary(name, other, x)
        return apply_binary(name, x, other)


def broadcastable(a, b):
    try:
        torch.broadcast_shapes(a.shape, b.shape)
        return True
    except RuntimeError:
        return False


@op("binary", weight=4.0)
class Binary:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: t.dtype != torch.bool)
        if x is None:
            return None
        t = st.vals[x]
        if is_float(t):
            name = rng.choice(BINARY)
        else:
            name = rng.choice(["add", "sub", "mul", "maximum", "minimum", "remainder", "floor_divide"])
        kind = rng.choices(["scalar", "param", "value", "self"], [3, 3, 3, 1])[0]
        p = {"op": name, "with": kind, "swap": rng.random() < 0.2}
        if name in ("remainder", "floor_divide"):
            kind = p["with"] = "scalar"
            p["swap"] = False
        ins = [x]
        if kind == "scalar":
            if is_float(t):
                p["s"] = rng.choice([0.5, -1.25, 2.0, 3.0, 0.1]) if name != "div" else rng.choice([2.0, -4.0, 0.75])
            else:
                p["s"] = rng.choice([2, 3, -1, 5]) if name not in ("remainder", "floor_divide") else rng.choice([2, 3, 5])
        elif kind == "param":
            p["shape"] = broadcast_shape(rng, list(t.shape))
        elif kind == "value":
            # Another value (a residual, when it has the same shape).
            cands = [i for i, u in enumerate(st.vals) if i != x and u.dtype == t.dtype and broadcastable(t, u)]
            if not cands:
                return None
            same = [i for i in cands if st.vals[i].shape == t.shape]
            ins.append(rng.choice(same if same and rng.random() < 0.6 else cands))
        return ins, p

    module = BinaryModule


# ---- dtypes: casts, comparisons, masks --------------------------------------


class CastModule(Layer):
    def forward(self, x):
        k = self.p["kind"]
        if k == "to_f64":
            return x.to(torch.float64)
        if k == "to_float":
            return x.to(fdt())
        if k == "quantize":
            return (x * self.p["s"]).to(torch.int64)
        if k == "to_bool":
            return x != 0
        if k == "to_int":
            return x.to(torch.int64)
        if k == "type_as":
            return x.float().to(fdt()) if x.dtype == torch.bool else x.to(fdt())
        raise ValueError(k)


@op("cast", weight=1.5, exact=True)
class Cast:
    def requires_exact(self, p):
        return p["kind"] in ("quantize", "to_bool")

    def propose(self, st, rng):
        x = st.pick(rng, lambda t: True)
        if x is None:
            return None
        t = st.vals[x]
        if t.dtype == torch.float32 or t.dtype == fdt():
            options = ["to_f64"]
            if st.exact[x]:
                options += ["quantize", "quantize", "to_bool"]
        elif t.dtype == torch.float64:
            options = ["to_float", "to_float"] + (["quantize"] if st.exact[x] else [])
        elif t.dtype == torch.int64:
            options = ["to_float", "to_bool", "to_f64"]
        else:
            options = ["to_float", "to_int", "type_as"]
        k = rng.choice(options)
        if k in ("to_bool", "quantize") and is_float(t) and not st.exact[x]:
            return None
        return [x], dict(kind=k, s=rng.choice([2.0, 4.0, 8.0]))

    module = CastModule


class CompareModule(Layer):
    def forward(self, x, *ys):
        other = ys[0] if ys else self.p["s"]
        return getattr(torch, self.p["op"])(x, other)


@op("compare", weight=1.0, needs_exact=True)
class Compare:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: t.dtype != torch.bool, exact=True)
        if x is None:
            return None
        t = st.vals[x]
        p = dict(op=rng.choice(["gt", "lt", "ge", "le", "eq", "ne"]))
        p["s"] = rng.choice([0.0, 0.5, -0.3]) if is_float(t) else rng.choice([0, 1, -2])
        ins = [x]
        if rng.random() < 0.4:
            y = st.pick(rng, lambda u: u.dtype == t.dtype and broadcastable(t, u), exact=True)
            if y is not None:
                ins.append(y)
        return ins, p

    module = CompareModule


class LogicModule(Layer):
    def forward(self, m, *xs):
        k = self.p["kind"]
        if k == "not":
            return torch.logical_not(m)
        if k in ("and", "or", "xor"):
            return getattr(torch, f"logical_{k}")(m, xs[0])
        if k == "where":
            a = xs[0]
            b = xs[1] if len(xs) > 1 else torch.zeros_like(a) + self.p["s"]
            return torch.where(m, a, b)
        if k == "where_scalar":
            return torch.where(m, xs[0], self.p["s"])
        if k == "masked_fill":
            return xs[0].masked_fill(m, self.p["s"])
        raise ValueError(k)


@op("logic", weight=1.0, exact=True)
class Logic:
    def propose(self, st, rng):
        m = st.pick(rng, lambda t: t.dtype == torch.bool)
        if m is None:
            return None
        mt = st.vals[m]
        k = rng.choice(["not", "and", "or", "xor", "where", "where", "where_scalar", "masked_fill"])
        p = dict(kind=k, s=rng.choice([0.0, -1.0, 2.5]))
        if k == "not":
            return [m], p
        if k in ("and", "or", "xor"):
            y = st.pick(rng, lambda u: u.dtype == torch.bool and broadcastable(mt, u))
            return (None if y is None else ([m, y], p))
        a = st.pick(rng, lambda u: is_float(u) and broadcastable(mt, u) and (k == "where" or torch.broadcast_shapes(mt.shape, u.shape) == u.shape))
        if a is None:
            return None
        ins = [m, a]
        if k == "where" and rng.random() < 0.5:
            b = st.pick(rng, lambda u: u.dtype == st.vals[a].dtype and broadcastable(mt, u) and broadcastable(st.vals[a], u))
            if b is not None:
                ins.append(b)
        return ins, p

    module = LogicModule


# ---- reductions, softmax ---------------------------------------------------


# Reductions over the dims `dims` (or the first of them, `d0`).
REDUCTIONS = {
    "sum": lambda x, dims, d0, keep, corr: x.sum(dim=dims, keepdim=keep),
    "mean": lambda x, dims, d0, keep, corr: x.mean(dim=dims, keepdim=keep),
    "amax": lambda x, dims, d0, keep, corr: x.amax(dim=dims, keepdim=keep),
    "amin": lambda x, dims, d0, keep, corr: x.amin(dim=dims, keepdim=keep),
    "max": lambda x, dims, d0, keep, corr: x.max(dim=d0, keepdim=keep).values,
    "min": lambda x, dims, d0, keep, corr: x.min(dim=d0, keepdim=keep).values,
    "var": lambda x, dims, d0, keep, corr: x.var(dim=dims, keepdim=keep, correction=corr),
    "std": lambda x, dims, d0, keep, corr: x.std(dim=dims, keepdim=keep, correction=corr),
    "logsumexp": lambda x, dims, d0, keep, corr: torch.logsumexp(x, dim=dims, keepdim=keep),
    "prod": lambda x, dims, d0, keep, corr: torch.prod(torch.clamp(x, -1.5, 1.5), dim=d0, keepdim=keep),
    "norm": lambda x, dims, d0, keep, corr: torch.linalg.vector_norm(x, dim=dims, keepdim=keep),
    "argmax": lambda x, dims, d0, keep, corr: x.argmax(dim=d0, keepdim=keep),
    "argmin": lambda x, dims, d0, keep, corr: x.argmin(dim=d0, keepdim=keep),
    "any": lambda x, dims, d0, keep, corr: x.any(dim=d0, keepdim=keep),
    "all": lambda x, dims, d0, keep, corr: x.all(dim=d0, keepdim=keep),
    "cumsum": lambda x, dims, d0, keep, corr: torch.cumsum(x, dim=d0),
    "sum_all": lambda x, dims, d0, keep, corr: x.sum(),
    "mean_all": lambda x, dims, d0, keep, corr: x.mean(),
}


class ReduceModule(Layer):
    def forward(self, x):
        p = self.p
        return REDUCTIONS[p["kind"]](x, p["dims"], p["dims"][0], p["keep"], p["corr"])


@op("reduce", weight=2.0)
class Reduce:
    def requires_exact(self, p):
        return p["kind"] in ("argmax", "argmin")

    def propose(self, st, rng):
        x = st.pick(rng, lambda t: t.dim() >= 1)
        if x is None:
            return None
        t = st.vals[x]
        if t.dtype == torch.bool:
            kinds = ["any", "all", "sum"]
        elif not is_float(t):
            kinds = ["sum", "amax", "amin", "max", "cumsum", "sum_all"]
        else:
            kinds = ["sum", "mean", "mean", "amax", "amin", "max", "min", "var", "std", "logsumexp", "prod", "norm", "cumsum", "sum_all", "mean_all"]
            if st.exact[x]:
                kinds += ["argmax", "argmin"]
        k = rng.choice(kinds)
        n = rng.choice([1, 1, 1, 2]) if t.dim() >= 2 else 1
        dims = sorted(rng.sample(range(t.dim()), n))
        if rng.random() < 0.3:
            dims = [d - t.dim() for d in dims]
        return [x], dict(kind=k, dims=dims, keep=rng.random() < 0.4, corr=rng.choice([0, 1]))

    module = ReduceModule


@op("softmax", weight=1.5)
class Softmax:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: is_float(t) and t.dim() >= 1)
        if x is None:
            return None
        t = st.vals[x]
        return [x], dict(dim=rng.randrange(-t.dim(), t.dim()), log=rng.random() < 0.3)

    def make(self, p, xs):
        f = F.log_softmax if p["log"] else F.softmax
        return Fn(lambda x: f(x, dim=p["dim"]))


# ---- upsampling ------------------------------------------------------------


@op("upsample", weight=1.0)
class Upsample:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: is_f32(t) and t.dim() in (3, 4))
        if x is None:
            return None
        t = st.vals[x]
        modes = ["nearest", "nearest"] + (["bilinear", "bilinear", "bicubic"] if t.dim() == 4 else ["linear"])
        mode = rng.choice(modes)
        p = dict(mode=mode, align=rng.random() < 0.4 if mode != "nearest" else None)
        if rng.random() < 0.5:
            p["scale"] = rng.choice([2.0, 2.0, 3.0])
        else:
            p["size"] = [rng.randint(1, 2 * s + 1) for s in t.shape[2:]]
        return [x], p

    def make(self, p, xs):
        if "scale" in p:
            return Fn(lambda x: F.interpolate(x, scale_factor=p["scale"], mode=p["mode"], align_corners=p["align"]))
        return Fn(lambda x: F.interpolate(x, size=p["size"], mode=p["mode"], align_corners=p["align"]))


# ---- views and data movement -------------------------------------------------


def factorisations(n, rank, rng):
    """A random shape of `rank` dims with product n."""
    dims = []
    left = n
    for _ in range(rank - 1):
        d = rng.choice(divisors(left))
        dims.append(d)
        left //= d
    dims.append(left)
    rng.shuffle(dims)
    return dims


class ShapeModule(Layer):
    def forward(self, x, *ys):
        p = self.p
        k = p["kind"]
        if k == "reshape":
            return x.reshape(p["shape"])
        if k == "view":
            return x.contiguous().view(p["shape"]) if p.get("contig") else x.view(p["shape"])
        if k == "flatten":
            return torch.flatten(x, p["a"], p["b"])
        if k == "unflatten":
            return x.unflatten(p["dim"], p["sizes"])
        if k == "squeeze":
            return x.squeeze(p["dim"]) if p["dim"] is not None else x.squeeze()
        if k == "unsqueeze":
            return x.unsqueeze(p["dim"])
        if k == "permute":
            return x.permute(p["perm"])
        if k == "transpose":
            return x.transpose(p["a"], p["b"])
        if k == "expand":
            return x.expand(p["shape"])
        if k == "slice":
            idx = [slice(None)] * p["dim"] + [slice(p["start"], p["end"], p["step"])]
            return x[tuple(idx)]
        if k == "narrow":
            return x.narrow(p["dim"], p["start"], p["len"])
        if k == "select":
            return x.select(p["dim"], p["index"])
        if k == "cat":
            return torch.cat([x, *ys] if not p.get("self") else [x, x * 0.5 if is_float(x) else x], dim=p["dim"])
        if k == "split":
            parts = torch.split(x, p["size"], dim=p["dim"])
            return parts[p["pick"] % len(parts)]
        if k == "split_swap":
            parts = torch.split(x, p["size"], dim=p["dim"])
            return torch.cat(list(reversed(parts)), dim=p["dim"])
        if k == "chunk":
            parts = torch.chunk(x, p["n"], dim=p["dim"])
            return parts[p["pick"] % len(parts)]
        if k == "unbind":
            return torch.stack(list(reversed(torch.unbind(x, p["dim"]))), dim=p["dim"])
        if k == "stack":
            return torch.stack([x, *ys] if ys else [x, x], dim=p["dim"])
        if k == "pad":
            if p["mode"] == "constant":
                return F.pad(x, p["pads"], value=p["value"])
            return F.pad(x, p["pads"], mode=p["mode"])
        if k == "repeat":
            return x.repeat(p["reps"])
        if k == "flip":
            return torch.flip(x, p["dims"])
        if k == "roll":
            return torch.roll(x, p["shift"], p["dim"])
        if k == "contiguous":
            return x.transpose(p["a"], p["b"]).contiguous()
        if k == "index_select":
            return torch.index_select(x, p["dim"], torch.tensor(p["index"], dtype=torch.long))
        if k == "clone":
            return x.clone()
        if k == "tril":
            return torch.tril(x, p["diag"])
        raise ValueError(k)


SHAPE_KINDS = {
    "reshape": 3,
    "view": 2,
    "flatten": 3,
    "unflatten": 1,
    "squeeze": 1,
    "unsqueeze": 2,
    "permute": 3,
    "transpose": 2,
    "expand": 1.5,
    "slice": 2,
    "narrow": 1,
    "select": 1.5,
    "cat": 2,
    "split": 1,
    "split_swap": 0.5,
    "chunk": 1,
    "unbind": 0.5,
    "stack": 1,
    "pad": 2,
    "repeat": 0.7,
    "flip": 0.5,
    "roll": 0.3,
    "contiguous": 0.7,
    "index_select": 0.7,
    "clone": 0.3,
    "tril": 0.3,
}


@op("shape", weight=8.0, exact=True)
class Shape:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: t.dim() >= 1)
        if x is None:
            return None
        t = st.vals[x]
        r = t.dim()
        k = rng.choices(list(SHAPE_KINDS), list(SHAPE_KINDS.values()))[0]
        p = dict(kind=k)
        ins = [x]
        dim = rng.randrange(r)
        n = t.shape[dim]
        if k in ("reshape", "view"):
            p["shape"] = factorisations(t.numel(), rng.randint(1, 4), rng)
            if rng.random() < 0.3:
                p["shape"][rng.randrange(len(p["shape"]))] = -1
            p["contig"] = rng.random() < 0.5
        elif k == "flatten":
            a = rng.randrange(r)
            p.update(a=a, b=rng.randrange(a, r))
        elif k == "unflatten":
            p.update(dim=dim, sizes=factorisations(n, 2, rng))
        elif k == "squeeze":
            ones = [d for d in range(r) if t.shape[d] == 1]
            p["dim"] = rng.choice(ones + [None]) if ones else None
        elif k == "unsqueeze":
            p["dim"] = rng.randint(-r - 1, r)
        elif k == "permute":
            perm = list(range(r))
            rng.shuffle(perm)
            p["perm"] = perm
        elif k in ("transpose", "contiguous"):
            p.update(a=rng.randrange(r), b=rng.randrange(r))
        elif k == "expand":
            shape = [rng.choice([2, 3]) if s == 1 else s for s in t.shape]
            if rng.random() < 0.3:
                shape = [rng.choice([2, 3])] + shape
            p["shape"] = shape
        elif k in ("slice", "narrow"):
            start = rng.randrange(n)
            end = rng.randint(start + 1, n)
            p.update(dim=dim, start=start, end=end, step=rng.choice([1, 1, 2]), len=end - start)
            if k == "slice" and rng.random() < 0.2:
                p.update(start=-n + start, end=None)
        elif k == "select":
            p.update(dim=dim, index=rng.randrange(-n, n))
        elif k == "cat":
            p["dim"] = dim
            y = st.pick(
                rng,
                lambda u: u.dtype == t.dtype and u.dim() == r and all(u.shape[d] == t.shape[d] for d in range(r) if d != dim),
            )
            if y is None or rng.random() < 0.2:
                p["self"] = True
            else:
                ins.append(y)
        elif k in ("split", "split_swap"):
            p.update(dim=dim, size=rng.randint(1, max(1, n)), pick=rng.randrange(4))
        elif k == "chunk":
            p.update(dim=dim, n=rng.randint(1, 4), pick=rng.randrange(4))
        elif k == "unbind":
            p["dim"] = dim
        elif k == "stack":
            p["dim"] = rng.randint(-r - 1, r)
            if rng.random() < 0.6:
                y = st.pick(rng, lambda u: u.dtype == t.dtype and u.shape == t.shape)
                if y is not None:
                    ins.append(y)
        elif k == "pad":
            m = rng.randint(1, min(3, r))
            pads = []
            for i in range(m):
                size = t.shape[r - 1 - i]
                pads += [rng.randint(-min(1, size - 1), 2), rng.randint(-min(1, size - 1), 2)]
            p["pads"] = pads
            p["value"] = rng.choice([0.0, 0.0, -1.5, 1.0])
            p["mode"] = rng.choices(["constant", "reflect", "replicate", "circular"], [12, 1, 1, 1])[0]
            if p["mode"] != "constant":
                p["pads"] = [max(0, v) for v in pads]
            if not is_float(t):
                p["value"] = int(p["value"])
                p["mode"] = "constant"
        elif k == "repeat":
            p["reps"] = [rng.choice([1, 1, 2]) for _ in range(r)] + ([2] if rng.random() < 0.2 else [])
            p["reps"] = p["reps"][::-1] if len(p["reps"]) > r else p["reps"]
        elif k == "flip":
            p["dims"] = sorted(rng.sample(range(r), rng.randint(1, r)))
        elif k == "roll":
            p.update(shift=rng.randint(-3, 3), dim=dim)
        elif k == "index_select":
            p.update(dim=dim, index=[rng.randrange(n) for _ in range(rng.randint(1, 5))])
        elif k == "tril":
            if r < 2:
                return None
            p["diag"] = rng.randint(-1, 1)
        return ins, p

    module = ShapeModule


# ---- embeddings ------------------------------------------------------------


class Embed(Layer):
    def __init__(self, p, xs=None):
        super().__init__(p)
        self.emb = nn.Embedding(p["vocab"], p["dim"])

    def forward(self, x):
        return self.emb(torch.remainder(x, self.p["vocab"]))


@op("embedding", weight=1.0, exact=True)
class Embedding:
    def propose(self, st, rng):
        x = st.pick(rng, lambda t: t.dtype == torch.int64 and t.dim() <= 3)
        if x is None:
            return None
        return [x], dict(vocab=rng.choice([5, 10, 17]), dim=rng.choice([4, 8, 16]))

    module = Embed


# --------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------


def input_specs(rng):
    """The inputs: a primary one from a family of shapes real models take,
    sometimes a second (same shape, broadcastable, or a mask/ids)."""
    fam = rng.choices(["image", "seq", "tokens", "matrix", "ids", "vector"], [5, 3, 4, 2, 1.5, 0.5])[0]
    n = rng.choice([1, 1, 2, 3])
    if fam == "image":
        shape = [n, rng.choice([1, 2, 3, 4, 8]), rng.randint(3, 12), rng.randint(3, 12)]
    elif fam == "seq":
        shape = [n, rng.choice([1, 2, 4, 6, 8]), rng.randint(4, 24)]
    elif fam == "tokens":
        shape = [n, rng.randint(2, 12), rng.choice([4, 8, 12, 16, 32])]
    elif fam == "matrix":
        shape = [n * rng.choice([1, 2, 4]), rng.choice([3, 8, 16, 32, 64])]
    elif fam == "ids":
        shape = [n, rng.randint(2, 10)]
    else:
        shape = [rng.randint(1, 64)]
    dtype = "int64" if fam == "ids" else ("float64" if rng.random() < 0.04 else "float32")
    specs = [{"shape": shape, "dtype": dtype}]
    r = rng.random()
    if r < 0.15:
        specs.append({"shape": list(shape), "dtype": dtype})
    elif r < 0.25 and dtype == "float32":
        specs.append({"shape": [d if rng.random() < 0.5 else 1 for d in shape], "dtype": "float32"})
    elif r < 0.30:
        specs.append({"shape": list(shape), "dtype": "bool"})
    elif r < 0.35:
        specs.append({"shape": [shape[0], rng.randint(1, 8)], "dtype": "int64"})
    return specs


def make_input(spec, gen):
    shape, dtype = spec["shape"], DTYPES[spec["dtype"]]
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if dtype == torch.int64:
        return torch.randint(-20, 20, shape, generator=gen)
    return torch.randn(shape, generator=gen).to(dtype)


def example_inputs(desc, case):
    gen = torch.Generator().manual_seed(desc["input_seed"] + 7919 * case)
    return tuple(make_input(s, gen) for s in desc["inputs"])


class FuzzModel(nn.Module):
    def __init__(self, layers, mods, n_inputs, outputs):
        super().__init__()
        self.layer_ins = [list(l["in"]) for l in layers]
        self.mods = nn.ModuleList(mods)
        self.n_inputs = n_inputs
        self.outputs = list(outputs)

    def forward(self, *xs):
        vals = list(xs)
        for ins, m in zip(self.layer_ins, self.mods):
            vals.append(m(*[vals[i] for i in ins]))
        return tuple(vals[o] for o in self.outputs)


class Rejected(Exception):
    pass


def check_value(t):
    if not torch.is_tensor(t):
        raise Rejected("not a tensor")
    if t.numel() > MAX_NUMEL:
        raise Rejected(f"{t.numel()} elements")
    if t.numel() == 0:
        raise Rejected("empty")
    if t.dim() > 5:
        raise Rejected("rank > 5")
    if is_float(t):
        if not torch.isfinite(t).all():
            raise Rejected("not finite")
        if t.abs().max() > MAX_ABS:
            raise Rejected("too large")
    elif t.dtype == torch.int64 and t.abs().max() > 1_000_000:
        raise Rejected("int too large")


def result_exact(o, layer, exact, out):
    """Whether a layer's result is exact: not a float, or data movement
    (and exact casts) of exact values."""
    return not is_float(out) or (o.exact and all(exact[i] for i in layer["in"]))


def make_layer(layer, xs):
    with torch.random.fork_rng():
        torch.manual_seed(layer["seed"])
        return OPS[layer["op"]].make(layer["p"], xs).eval()


def build(desc, cases=1):
    """(model, per-case inputs). Raises Rejected when a layer does not apply."""
    inputs = [example_inputs(desc, c) for c in range(cases)]
    vals = [list(x) for x in inputs]
    n_in = len(desc["inputs"])
    exact = [True] * n_in
    mods = []
    with torch.no_grad():
        for layer in desc["layers"]:
            if any(i >= len(exact) for i in layer["in"]):
                raise Rejected("dangling input")
            o = OPS[layer["op"]]
            if o.requires_exact(layer["p"]) and not all(
                exact[i] or not is_float(vals[0][i]) for i in layer["in"]
            ):
                raise Rejected("step function of an inexact value")
            mod = make_layer(layer, [vals[0][i] for i in layer["in"]])
            for v in vals:
                try:
                    out = mod(*[v[i] for i in layer["in"]])
                except Rejected:
                    raise
                except Exception as e:  # a layer that does not apply to these shapes
                    raise Rejected(f"{layer['op']}: {type(e).__name__}: {str(e)[:200]}")
                check_value(out)
                v.append(out)
            exact.append(result_exact(o, layer, exact, vals[0][-1]))
            mods.append(mod)
    model = FuzzModel(desc["layers"], mods, n_in, desc["outputs"]).eval()
    return model, inputs


IMAGE_BOOST = {"conv": 2.0, "pool": 2.0, "norm": 1.5, "act": 1.5}


def generate(seed, index, attempt=0):
    rng = random.Random(f"{seed}:{index}:{attempt}")
    desc = {
        "seed": seed,
        "index": index,
        "attempt": attempt,
        "input_seed": rng.randrange(2**31),
        "inputs": input_specs(rng),
        "layers": [],
        "outputs": [],
    }
    ins = [example_inputs(desc, 0)]
    st = State(list(ins[0]), [True] * len(ins[0]), flavour(index))
    n_layers = rng.choice([2, 3, 4, 4, 5, 5, 6, 6, 7, 8, 10, 12])
    names = sorted(OPS)
    weights = [OPS[n].weight for n in names]
    tries = 0
    while len(desc["layers"]) < n_layers and tries < 300:
        tries += 1
        # After an image, mostly what image networks do next.
        image = st.vals[-1].dim() == 4 and is_f32(st.vals[-1])
        name = rng.choices(names, [w * IMAGE_BOOST.get(n, 1.0) if image else w for n, w in zip(names, weights)])[0]
        prop = OPS[name].propose(st, rng)
        if prop is None:
            continue
        ins_ids, p = prop
        layer = {"op": name, "in": ins_ids, "p": p, "seed": rng.randrange(2**31)}
        trial = dict(desc, layers=desc["layers"] + [layer], outputs=[len(st.vals)])
        try:
            model, _ = build(trial)
            with torch.no_grad():
                out = model(*ins[0])[0]
        except Rejected:
            continue
        desc["layers"].append(layer)
        st.vals.append(out)
        st.exact.append(result_exact(OPS[name], layer, st.exact, out))
    n_in = len(desc["inputs"])
    if not desc["layers"]:
        return None
    last = len(st.vals) - 1
    outs = [last]
    # Sometimes a second output, an earlier layer's result.
    earlier = list(range(n_in, last))
    if earlier and rng.random() < 0.25:
        outs.append(rng.choice(earlier))
    desc["outputs"] = outs
    desc["cases"] = rng.choice([1, 2, 2])
    return prune(desc)


def flavour(index):
    return "portable" if index % 2 == 0 else "xnnpack"


def describe(desc):
    """A readable listing of a description."""
    lines = []
    for i, s in enumerate(desc["inputs"]):
        lines.append(f"v{i} = input {s['dtype']}{s['shape']}")
    n_in = len(desc["inputs"])
    for j, l in enumerate(desc["layers"]):
        args = ", ".join(f"v{i}" for i in l["in"])
        lines.append(f"v{n_in + j} = {l['op']}({args}) {json.dumps(l['p'], sort_keys=True)}")
    lines.append("return " + ", ".join(f"v{o}" for o in desc["outputs"]))
    return "\n".join(lines)


def drop_layer(desc, j):
    """The description without layer j: its readers read its first input
    instead, later ids shift down by one. None if that leaves no layer."""
    n_in = len(desc["inputs"])
    if len(desc["layers"]) <= 1:
        return None
    gone = n_in + j
    repl = desc["layers"][j]["in"][0]

    def remap(i):
        if i == gone:
            i = repl
        return i - 1 if i > gone else i

    layers = []
    for k, l in enumerate(desc["layers"]):
        if k == j:
            continue
        layers.append(dict(l, **{"in": [remap(i) for i in l["in"]]}))
    outs = []
    for o in desc["outputs"]:
        o = remap(o)
        if o >= n_in and o not in outs:
            outs.append(o)
    if not outs:
        return None
    d = copy.deepcopy(desc)
    d["layers"] = layers
    d["outputs"] = outs
    return d


def prune(desc):
    """Drops layers nothing reads (dead code), keeping ids consistent."""
    while True:
        n_in = len(desc["inputs"])
        used = set(desc["outputs"])
        for l in desc["layers"]:
            used.update(l["in"])
        dead = [j for j in range(len(desc["layers"])) if n_in + j not in used]
        if not dead:
            return desc
        d = drop_layer(desc, dead[-1])
        if d is None:
            return desc
        desc = d
