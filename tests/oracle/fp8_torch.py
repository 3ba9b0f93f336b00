"""fp8_torch.py: FP8 training of the layers' products in float64 PyTorch, Transformer Engine's delayed
scaling as Megatron uses it, written from TE's documented recipe (DelayedScaling; the amax history rolled
by one, row 0 zeroed, scale = fp8_max * 2^-margin / amax when finite and > 0) and its Linear modules:

  forward   y = q(x) . q(w)^T + b            q with the forward format (E4M3), scales from before the pass
  backward  dx = q(dy) . q(w), dw = q(dy)^T . q(x), db = sum dy (unquantized)
            q(dy) with the backward format (E4M3 for --fp8-format e4m3, E5M2 for hybrid)

Each product's input, weight and output gradient has its own scale and amax history. After a training
forward the forward tensors' histories and scales are updated, after a backward the gradients'. A weight
is quantized with the scale it had at the iteration's first forward and its amax recorded only then (TE's
is_first_microbatch). A forward outside training uses the current scales and records nothing.

The quantization itself is fp8_ref.qdq (the value times the fp32 scale rounded to fp32, rounded to the
format, times the fp32 reciprocal); everything else is float64.
"""
import numpy as np
import torch

import fp8_ref

EBITS = {"e4m3": 4, "e5m2": 5}
FMAX = {"e4m3": 448.0, "e5m2": 57344.0}


class Recipe:
    def __init__(self, fmt="hybrid", margin=0, history_len=1, algo="most_recent"):
        self.fwd = "e4m3"
        self.bwd = "e5m2" if fmt == "hybrid" else "e4m3"
        self.margin, self.L, self.algo = margin, history_len, algo


class State:
    """The scales and histories of num_layers layers, one after another: a layer's forward tensors 2 p
    (input) and 2 p + 1 (weight), gradients p, p the product (0 QKV, 1 dense, 2 h_to_4h, 3 4h_to_h); with
    experts (moe_layers: the layers that are MoE layers, El: the experts a rank) an MoE layer's slot s (of
    El) has forward tensors 8 + 4 s + 2 q (+ 1) and gradients 4 + 2 s + q of its products q (0, 1)."""

    def __init__(self, recipe, num_layers, moe_layers=(), El=0):
        self.r, self.El = recipe, El
        wf = [8 + (4 * El if l in moe_layers else 0) for l in range(num_layers)]
        wb = [4 + (2 * El if l in moe_layers else 0) for l in range(num_layers)]
        self.of = np.concatenate(([0], np.cumsum(wf))).astype(int)
        self.ob = np.concatenate(([0], np.cumsum(wb))).astype(int)
        self.sf, self.sb = int(self.of[-1]), int(self.ob[-1])
        self.scale_f = np.ones(self.sf, np.float32)
        self.scale_b = np.ones(self.sb, np.float32)
        self.hist_f = np.zeros((recipe.L, self.sf), np.float32)
        self.hist_b = np.zeros((recipe.L, self.sb), np.float32)
        self.wscale = np.ones(self.sf, np.float32)
        self.new_iter = True
        self.training = False
        self.pass_scale = self.scale_f.copy()

    def flat(self):
        """The state in mt_gpt_fp8_state_get's order: scale_f, hist_f, scale_b, hist_b."""
        return np.concatenate([self.scale_f, self.hist_f.ravel(), self.scale_b, self.hist_b.ravel()])

    def load(self, flat):
        """The state from mt_gpt_fp8_state_get's floats; the next forward starts an iteration."""
        L, o = self.r.L, 0
        for name, shape in (("scale_f", (self.sf,)), ("hist_f", (L, self.sf)), ("scale_b", (self.sb,)),
                            ("hist_b", (L, self.sb))):
            n = int(np.prod(shape))
            setattr(self, name, np.array(flat[o:o + n], np.float32).reshape(shape))
            o += n
        assert o == len(flat), (o, len(flat))
        self.new_iter = True

    def start_iteration(self):
        self.new_iter = True

    def forward_begin(self, training):
        self.training = training
        if training and self.new_iter:
            self.wscale = self.scale_f.copy()
        self.pass_scale = self.scale_f.copy()

    def _update(self, hist, scale, fmt):
        L = self.r.L
        amax = hist[0].copy() if self.r.algo == "most_recent" else hist.max(axis=0)
        last = hist[0].copy()
        hist[:L - 1] = hist[1:].copy()
        hist[L - 1] = last
        hist[0] = 0
        sm = np.float32(FMAX[fmt] * 2.0 ** -self.r.margin)
        ok = np.isfinite(amax) & (amax > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = (sm / amax).astype(np.float32)
        scale[ok] = new[ok]

    def forward_end(self):
        if not self.training:
            return
        self._update(self.hist_f, self.scale_f, self.r.fwd)
        self.new_iter = False

    def backward_end(self):
        self._update(self.hist_b, self.scale_b, self.r.bwd)

    def _q(self, t, scale, fmt, hist=None, j=None):
        a = t.detach().numpy()
        if hist is not None and a.size:
            hist[0, j] = max(hist[0, j], np.float32(np.abs(a).max()))
        return torch.tensor(fp8_ref.qdq(a, float(scale), EBITS[fmt]).astype(np.float64))

    def q_input(self, x, j):
        rec = self.hist_f if self.training else None
        return self._q(x, self.pass_scale[j], self.r.fwd, rec, j)

    def q_weight(self, w, j):
        rec = self.hist_f if self.training and self.new_iter else None
        return self._q(w, self.wscale[j], self.r.fwd, rec, j)

    def q_grad(self, dy, j):
        return self._q(dy, self.scale_b[j], self.r.bwd, self.hist_b, j)


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, st, jf, jb):
        xq, wq = st.q_input(x, jf), st.q_weight(w, jf + 1)
        ctx.save_for_backward(xq, wq)
        ctx.st, ctx.jb = st, jb
        return xq @ wq.T + b

    @staticmethod
    def backward(ctx, dy):
        xq, wq = ctx.saved_tensors
        dyq = ctx.st.q_grad(dy, ctx.jb)
        C, OC = xq.shape[-1], dyq.shape[-1]
        dx = dyq @ wq
        dw = dyq.reshape(-1, OC).T @ xq.reshape(-1, C)
        db = dy.reshape(-1, OC).sum(0)
        return dx, dw, db, None, None, None


def linear(st):
    """gpt_torch's and llama_torch's lin argument: the products through FP8 with state st (no bias: zero)."""
    def lin(layer, p, x, w, b=None):
        b = torch.zeros(w.shape[0], dtype=w.dtype) if b is None else b
        return _Linear.apply(x, w, b, st, int(st.of[layer]) + 2 * p, int(st.ob[layer]) + p)
    return lin


def expert_linear(st):
    """moe_torch's experts' products through FP8: expert e's product q of layer l (x its rows) with the
    tensors of slot e mod El (Transformer Engine reduces a GroupedLinear's amaxes by the GEMM's place in the
    rank's module: the rank's expert j shares them with expert j of the other expert ranks)."""
    def lin(layer, e, q, x, w):
        s = e % st.El
        b = torch.zeros(w.shape[0], dtype=w.dtype)
        return _Linear.apply(x, w, b, st, int(st.of[layer]) + 8 + 4 * s + 2 * q, int(st.ob[layer]) + 4 + 2 * s + q)
    return lin
