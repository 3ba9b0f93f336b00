#!/usr/bin/env bash
# kernels-torch.sh: the LLaMA-family kernels against float64 PyTorch written from Megatron core's
# definitions, on the cpu backend and on the CUDA kernels under the simulator (fp32):
#   - RMSNorm: x * rsqrt(mean(x^2) + eps) * w, and its gradients of x and w (autograd);
#   - SwiGLU: x1, x2 = torch.chunk(x, 2, -1); silu(x1) * x2, and the gradient of both halves;
#   - rotary embeddings: qkv viewed as [B, T, ng, (np/ng + 2) hn] and split into np/ng query heads, a key
#     head and a value head per group; inv_freq = 1 / base^(arange(0, rot, 2) / rot), emb = cat(freqs,
#     freqs), t[..., :rot] * cos + rotate_half(t[..., :rot]) * sin on q and k at positions pos0 .. pos0+T-1,
#     and the gradient through it (autograd);
#   - grouped-query causal attention: k and v repeat_interleave'd over the np/ng query heads of their
#     group, softmax(q k^T / sqrt(hn)) v, the log-sum-exp, and the gradient of qkv (autograd).
# test_kernels --dump-llama writes the C side. Each result's max |C - ref| / max |ref| must be within
# about ten times the gap measured on cpu and sim (stated beside each tolerance below).
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
if ! $PY -c 'import numpy, torch' 2>/dev/null; then
    t_fail "torch reference" "no /usr/bin/python3 with numpy and torch (make deps installs python3-torch)"; exit 0
fi
t_kernel_dumps --dump-llama
for be in $T_DUMPED; do
    $PY - "$T_TMP/$be" "$T_FILE: $be" <<'PYEOF'
import sys
import numpy as np
import torch

d, me = sys.argv[1], sys.argv[2]
meta = {k: float(v) for k, v in (l.split() for l in open(d + "/meta.txt") if l.strip())}
N, C, F, B, T, NH, NG, HS, ROT, POS0 = (int(meta[k]) for k in "N C F B T NH NG HS ROT POS0".split())
EPS, BASE = meta["EPS"], meta["BASE"]

def load(name, shape):
    return torch.from_numpy(np.fromfile("%s/%s.f32" % (d, name), dtype="<f4").astype(np.float64).reshape(shape))

def check(name, got, ref, tol):
    err = (got - ref).abs().max().item() / max(ref.abs().max().item(), 1e-12)
    print("%s - %s: %s: relative error %.3g (tolerance %g)" % ("ok" if err <= tol else "not ok", me, name, err, tol))

# RMSNorm (measured 1e-7 forward, 1.1e-7 backward)
x = load("rms_x", (N, C)).requires_grad_()
w = load("rms_w", (C,)).requires_grad_()
g = load("rms_g", (N, C))
y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w
(y * g).sum().backward()
check("rmsnorm forward", load("rms_out", (N, C)), y.detach(), 2e-6)
check("rmsnorm dinp", load("rms_dx", (N, C)), x.grad, 2e-6)
check("rmsnorm dw", load("rms_dw", (C,)), w.grad, 2e-6)

# SwiGLU (measured 9e-8 forward and backward)
x = load("swiglu_x", (N, 2 * F)).requires_grad_()
g = load("swiglu_g", (N, F))
x1, x2 = torch.chunk(x, 2, -1)
y = torch.nn.functional.silu(x1) * x2
(y * g).sum().backward()
check("swiglu forward", load("swiglu_out", (N, F)), y.detach(), 1e-6)
check("swiglu dinp", load("swiglu_dx", (N, 2 * F)), x.grad, 1e-6)

# Megatron's split of the grouped qkv
per = NH // NG
def split(qkv):
    m = qkv.view(B, T, NG, (per + 2) * HS)
    q, k, v = torch.split(m, [per * HS, HS, HS], dim=3)
    return q.reshape(B, T, NH, HS), k, v   # k, v: [B, T, NG, HS]

def rotate_half(t):
    t1, t2 = torch.chunk(t, 2, dim=-1)
    return torch.cat((-t2, t1), dim=-1)

def rope(t, pos0):   # t [B, T, heads, HS]
    inv_freq = 1.0 / (BASE ** (torch.arange(0, ROT, 2, dtype=torch.float64) / ROT))
    freqs = torch.outer(torch.arange(pos0, pos0 + T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)[None, :, None, :]
    tr, tp = t[..., :ROT], t[..., ROT:]
    return torch.cat((tr * emb.cos() + rotate_half(tr) * emb.sin(), tp), dim=-1)

def join(q, k, v):
    return torch.cat((q.reshape(B, T, NG, per * HS), k, v), dim=3).reshape(B, T, -1)

# rotary embeddings (measured 2.9e-7 forward and backward; the fp32 angles at positions up to 23)
x = load("rope_x", (B, T, -1)).requires_grad_()
g = load("rope_g", (B, T, -1))
q, k, v = split(x)
y = join(rope(q, POS0), rope(k, POS0), v)
(y * g).sum().backward()
check("rope forward", load("rope_out", (B, T, -1)), y.detach(), 3e-6)
check("rope backward", load("rope_dx", (B, T, -1)), x.grad, 3e-6)

# grouped-query causal attention (measured 2.1e-7 forward, 9e-8 lse, 3e-7 backward)
x = load("att_qkv", (B, T, -1)).requires_grad_()
g = load("att_g", (B, T, NH * HS))
q, k, v = split(x)
q = q.transpose(1, 2)                                   # [B, NH, T, HS]
k = k.transpose(1, 2).repeat_interleave(per, dim=1)     # the group's key for each of its query heads
v = v.transpose(1, 2).repeat_interleave(per, dim=1)
s = q @ k.transpose(-1, -2) / HS ** 0.5
s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
lse = torch.logsumexp(s, -1)                            # [B, NH, T]
o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, NH * HS)
(o * g).sum().backward()
check("attention forward", load("att_out", (B, T, NH * HS)), o.detach(), 2e-6)
check("attention lse", load("att_lse", (B, NH, T)), lse.detach(), 1e-6)
check("attention dqkv", load("att_dqkv", (B, T, -1)), x.grad, 3e-6)
PYEOF
done
