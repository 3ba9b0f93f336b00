"""moe_torch.py: an independent float64 PyTorch reference of the mixture-of-experts GPT as Megatron-Core builds
it (--num-experts on the LLaMA-family model of llama_torch.py, whose attention, norms, training step and
checkpoint reader it uses), and of the router's losses in Megatron's training step.

Written from Megatron-Core's definitions (router.py, moe_utils.py, moe_layer.py, shared_experts.py), not
from the C code. Layer l (0-based) is a MoE layer when l % moe_layer_freq == 0, else the dense MLP. Its
input is the post-attention norm's output, its N = B T tokens taken in Megatron's order [s, b]:
  - router: logits = x . router.weight^T [N, E];
  - top-k (--moe-router-topk K): softmax: the softmax over the K largest logits, or with
    --moe-router-pre-softmax the softmax over all E taken at its K largest; sigmoid: the K largest
    sigmoids, divided by (their sum + 1e-20) when K > 1; times --moe-router-topk-scaling-factor;
  - capacity (--moe-expert-capacity-factor CF): ceil(N K / E x CF); an expert keeps at most that many of
    its choices, those of the largest probs (--moe-token-drop-policy probs; ties: the earlier token) or of
    the earliest tokens (position); a dropped choice weighs 0 (no gradient reaches its prob). With
    sequence parallelism over S tensor ranks (cfg "shards": S) each rank routes its shard of the positions
    (T / S of them, of every sequence: a run of N / S tokens of the order [s, b]) on its own: the capacity
    is ceil(N / S K / E x CF) and holds in each shard apart;
  - output: sum over a token's kept choices of prob x expert_e(x) (the SwiGLU MLP of local_experts.e),
    plus the shared expert (--moe-shared-expert-intermediate-size), times sigmoid(x . gate_weight^T) with
    --moe-shared-expert-gate;
  - load balancing (--moe-aux-loss-coeff c): scores = softmax over all E (sigmoid: the sigmoids over their
    sum + 1e-20), tokens_per_expert[e] = the tokens whose top K of the scores holds e (before dropping);
    aux_loss = E c / (K N^2) sum_e (sum_n scores[n][e]) tokens_per_expert[e]; seq_aux_loss the same over
    each sequence (N -> T) averaged over the B sequences;
  - z loss (--moe-z-loss-coeff z): z mean_n logsumexp(logits_n)^2.
The step differentiates the mean over micro-batches of (lm loss + every MoE layer's aux and z losses)
(MoEAuxLossAutoScaler's scale 1 / micro-batches); it logs the lm loss alone, and load_balancing_loss (or
seq_load_balancing_loss) and z_loss: the mean over micro-batches and MoE layers of aux / c and z_loss / z.

cfg: llama_torch's keys, and num_experts, topk, moe_layer_freq, score ("softmax" or "sigmoid"),
pre_softmax, scaling (0: none), capacity_factor (None: dropless), shards (1: none), drop_policy ("probs" or "position"),
aux_type ("aux_loss" or "seq_aux_loss"), aux_coeff, z_coeff (0: none), shared_size (0: none),
shared_gate. `python3 moe_torch.py [NAME]` checks the reference itself (self_check) and prints a test line
per check, "ok - NAME: ..." or "not ok - NAME: ...".
"""
import math
import sys

import torch

import fp8_torch
import llama_torch as base

PRE = base.PRE
F = torch.nn.functional


def is_moe(cfg, l):
    return l % cfg.get("moe_layer_freq", 1) == 0


def num_moe_layers(cfg):
    return sum(1 for l in range(cfg["num_layers"]) if is_moe(cfg, l))


def expected_names(cfg):
    """The tensors of the model: llama_torch's, with the router, experts and shared expert in the MLP's
    place in MoE layers."""
    out = []
    for n in base.expected_names(cfg["num_layers"]):
        parts = n[len(PRE):].split(".")
        if parts[0] != "encoder" or parts[1] != "layers" or parts[3] != "mlp" or not is_moe(cfg, int(parts[2])):
            out.append(n)
            continue
        if parts[4] != "dense_h_to_4h":
            continue
        p = PRE + "encoder.layers.%s.mlp." % parts[2]
        out.append(p + "router.weight")
        for j in range(cfg["num_experts"]):
            out += [p + "experts.local_experts.%d.%s.weight" % (j, s) for s in ("dense_h_to_4h", "dense_4h_to_h")]
        if cfg.get("shared_size", 0):
            out += [p + "shared_experts.dense_h_to_4h.weight", p + "shared_experts.dense_4h_to_h.weight"]
            if cfg.get("shared_gate"):
                out.append(p + "shared_experts.gate_weight")
    return out


def selection_scores(cfg, logits):
    """What the top K is taken of: the logits, or the softmax over all E (pre-softmax), or the sigmoids."""
    if cfg.get("score", "softmax") == "sigmoid":
        return torch.sigmoid(logits)
    return torch.softmax(logits, -1) if cfg.get("pre_softmax") else logits


def route(cfg, logits):
    """(probs [N, K], idx [N, K]) of the router's logits [N, E]."""
    K = cfg["topk"]
    vals, idx = selection_scores(cfg, logits).topk(K, dim=-1)
    if cfg.get("score", "softmax") == "sigmoid":
        probs = vals / (vals.sum(-1, keepdim=True) + 1e-20) if K > 1 else vals
    else:
        probs = vals if cfg.get("pre_softmax") else torch.softmax(vals, -1)
    if cfg.get("scaling"):
        probs = probs * cfg["scaling"]
    return probs, idx


def capacity(cfg, N):
    """An expert's capacity for N tokens, or None (dropless)."""
    cf = cfg.get("capacity_factor")
    if cf is None:
        return None
    return math.ceil(N * cfg["topk"] / cfg["num_experts"] * cf)


def shard_rows(cfg, N):
    """The runs of rows (order [s, b]) routed apart: one per sequence-parallel shard."""
    S = cfg.get("shards", 1)
    return [range(h * N // S, (h + 1) * N // S) for h in range(S)]


def kept(cfg, probs, idx):
    """keep [N, K] bool: the choices within their expert's capacity in their shard (all when dropless)."""
    N, K = idx.shape
    cap = capacity(cfg, N // cfg.get("shards", 1))
    keep = torch.ones(N, K, dtype=torch.bool)
    if cap is None:
        return keep
    p = probs.detach()
    for rows in shard_rows(cfg, N):
        for e in range(cfg["num_experts"]):
            choices = [(n, k) for n in rows for k in range(K) if idx[n, k] == e]  # in token order
            if cfg.get("drop_policy", "probs") == "probs":
                choices.sort(key=lambda c: -float(p[c]))                             # stable: ties keep order
            for n, k in choices[cap:]:
                keep[n, k] = False
    return keep


def aux_scores(cfg, logits):
    if cfg.get("score", "softmax") == "sigmoid":
        s = torch.sigmoid(logits)
        return s / (s.sum(-1, keepdim=True) + 1e-20)
    return torch.softmax(logits, -1)


def load_balancing(cfg, logits, B, T):
    """The aux (or seq aux) loss of logits [N, E] in Megatron's order [s, b], coefficient included."""
    E, K, c = cfg["num_experts"], cfg["topk"], cfg["aux_coeff"]
    scores = aux_scores(cfg, logits)
    _, top = scores.detach().topk(K, dim=-1)
    routed = torch.zeros_like(scores).scatter(1, top, 1.0)
    if cfg.get("aux_type", "aux_loss") == "seq_aux_loss":
        S = scores.view(T, B, E).sum(0)           # [B, E]: each sequence's sums
        counts = routed.view(T, B, E).sum(0)
        return (S * counts).sum() * (E * c / (K * T * T)) / B
    N = B * T
    return (scores.sum(0) * routed.sum(0)).sum() * (E * c / (K * N * N))


def z_loss(cfg, logits):
    return cfg["z_coeff"] * torch.logsumexp(logits, -1).square().mean()


class Record:
    """What a micro-batch's MoE layers add: the losses to differentiate, the logged values, the dropped
    choices, and the smallest margins of the routing decisions (a near tie could go the other way in fp32)."""

    def __init__(self):
        self.extra, self.aux, self.z = [], [], []
        self.dropped = self.choices = 0
        self.topk_margin = self.drop_margin = math.inf


def moe_layer(cfg, P, l, m, rec=None, lin=base.plain, elin=None):
    """Layer l's MoE output for m [B, T, h]; its losses go to rec (a Record); lin: the shared expert's products
    (llama_torch.logits'), elin(l, e, q, x, w): expert e's (None: plain)."""
    B, T, h = m.shape
    p = lambda s: P[PRE + "encoder.layers.%d.mlp.%s" % (l, s)]
    E, K = cfg["num_experts"], cfg["topk"]
    x = m.transpose(0, 1).reshape(T * B, h)       # Megatron's token order [s, b]
    logits = x @ p("router.weight").T
    probs, idx = route(cfg, logits)
    keep = kept(cfg, probs, idx)
    weight = probs * keep                          # a dropped choice weighs nothing
    out = torch.zeros_like(x)
    for e in range(E):
        n, k = torch.nonzero((idx == e) & keep, as_tuple=True)
        l1 = (lambda x_, w, e=e: elin(l, e, 0, x_, w)) if elin else None
        l2 = (lambda x_, w, e=e: elin(l, e, 1, x_, w)) if elin else None
        y = base.swiglu_mlp(x[n], p("experts.local_experts.%d.dense_h_to_4h.weight" % e),
                            p("experts.local_experts.%d.dense_4h_to_h.weight" % e), l1, l2)
        out = out.index_add(0, n, weight[n, k].unsqueeze(-1) * y)
    if cfg.get("shared_size", 0):
        y = base.swiglu_mlp(x, p("shared_experts.dense_h_to_4h.weight"), p("shared_experts.dense_4h_to_h.weight"),
                            lambda x_, w: lin(l, 2, x_, w), lambda x_, w: lin(l, 3, x_, w))
        if cfg.get("shared_gate"):
            y = y * torch.sigmoid(x @ p("shared_experts.gate_weight").T)
        out = out + y
    if rec is not None:
        if cfg.get("aux_coeff"):
            a = load_balancing(cfg, logits, B, T)
            rec.extra.append(a)
            rec.aux.append(a.item() / cfg["aux_coeff"])
        if cfg.get("z_coeff"):
            z = z_loss(cfg, logits)
            rec.extra.append(z)
            rec.z.append(z.item() / cfg["z_coeff"])
        rec.dropped += int((~keep).sum())
        rec.choices += keep.numel()
        s = selection_scores(cfg, logits.detach()).sort(-1, descending=True).values
        if K < E:
            rec.topk_margin = min(rec.topk_margin, float((s[:, K - 1] - s[:, K]).min()))
        cap = capacity(cfg, B * T // cfg.get("shards", 1))
        if cap is not None and cfg.get("drop_policy", "probs") == "probs":
            for rows in shard_rows(cfg, B * T):
                pd, ix = probs.detach()[rows.start:rows.stop], idx[rows.start:rows.stop]
                for e in range(E):
                    v = pd[ix == e].sort(descending=True).values
                    if len(v) > cap:
                        rec.drop_margin = min(rec.drop_margin, float(v[cap - 1] - v[cap]))
    return out.view(T, B, h).transpose(0, 1)


def mlp(rec, elin=None):
    """llama_torch.logits' mlp hook: the MoE layer where there is one, else the dense MLP; elin: the
    experts' products (moe_layer's)."""
    def f(cfg, P, l, m, lin=base.plain):
        return moe_layer(cfg, P, l, m, rec, lin, elin) if is_moe(cfg, l) else base.dense_mlp(cfg, P, l, m, lin)
    return f


class Trainer(base.Trainer):
    """llama_torch's step, the router's losses added to the objective. After step: logs (the metrics
    Megatron logs for the MoE layers), dropped and choices (over the step), topk_margin, drop_margin.
    With cfg "fp8" (the format, "hybrid" or "e4m3"; "local_experts": El, default every expert) the products
    go through fp8_torch's delayed scaling, its State in self.fp8 (the experts' in slots of El); with "dp": D
    the micro-batches go in rounds of D, as on D data-parallel ranks: the state updated after each round's
    forward passes and after its backward passes (the amaxes of the round's passes, their max)."""

    def __init__(self, cfg, P):
        super().__init__(cfg, P)
        self.fp8 = None
        if cfg.get("fp8"):
            L, E = cfg["num_layers"], cfg["num_experts"]
            self.fp8 = fp8_torch.State(fp8_torch.Recipe(cfg["fp8"]), L, [l for l in range(L) if is_moe(cfg, l)],
                                       cfg.get("local_experts", E))

    def start_step(self):
        self.passes = 0
        if self.fp8:
            self.fp8.start_iteration()

    def round_ends(self):
        return self.passes % self.cfg.get("dp", 1) == 0

    def after_backward(self):
        if self.fp8 and self.round_ends():
            self.fp8.backward_end()

    def step(self, micro_batches, lr, wd, clip):
        self.recs = []
        out = super().step(micro_batches, lr, wd, clip)
        n, L = len(self.recs), num_moe_layers(self.cfg)
        self.logs = {}
        if self.cfg.get("aux_coeff"):
            name = "seq_load_balancing_loss" if self.cfg.get("aux_type") == "seq_aux_loss" else "load_balancing_loss"
            self.logs[name] = sum(sum(r.aux) for r in self.recs) / n / L
        if self.cfg.get("z_coeff"):
            self.logs["z_loss"] = sum(sum(r.z) for r in self.recs) / n / L
        self.dropped = sum(r.dropped for r in self.recs)
        self.choices = sum(r.choices for r in self.recs)
        self.topk_margin = min(r.topk_margin for r in self.recs)
        self.drop_margin = min(r.drop_margin for r in self.recs)
        return out

    def objective(self, tok, tgt, mask):
        rec = Record()
        self.recs.append(rec)
        if not self.fp8:
            lm = base.loss(self.cfg, self.P, tok, tgt, mask, mlp(rec))
            return lm + sum(rec.extra), lm
        self.fp8.forward_begin(True)
        lm = base.loss(self.cfg, self.P, tok, tgt, mask, mlp(rec, fp8_torch.expert_linear(self.fp8)),
                       fp8_torch.linear(self.fp8))
        self.passes += 1
        if self.round_ends():
            self.fp8.forward_end()
        return lm + sum(rec.extra), lm


# ---- the reference checked on its own ----

def _loop_losses(cfg, logits, B, T):
    """aux (or seq aux) and z losses of logits [N, E] (order [s, b]) by plain loops over Python floats."""
    E, K = cfg["num_experts"], cfg["topk"]
    rows = logits.tolist()
    scores = []
    for r in rows:
        if cfg.get("score", "softmax") == "sigmoid":
            s = [1 / (1 + math.exp(-v)) for v in r]
        else:
            mx = max(r)
            s = [math.exp(v - mx) for v in r]
        tot = sum(s) + (1e-20 if cfg.get("score", "softmax") == "sigmoid" else 0.0)
        scores.append([v / tot for v in s])
    groups = [list(range(T * B))] if cfg.get("aux_type", "aux_loss") == "aux_loss" else \
        [[t * B + b for t in range(T)] for b in range(B)]
    aux = 0.0
    for g in groups:
        for e in range(E):
            psum = sum(scores[n][e] for n in g)
            count = sum(1 for n in g if e in sorted(range(E), key=lambda j: -scores[n][j])[:K])
            aux += E * cfg["aux_coeff"] / (K * len(g) ** 2) * psum * count
    aux /= len(groups)
    z = 0.0
    for r in rows:
        mx = max(r)
        z += (mx + math.log(sum(math.exp(v - mx) for v in r))) ** 2
    return aux, cfg["z_coeff"] * z / len(rows)


def _loop_route(cfg, logits):
    """route() by loops: a list per token of (expert, prob)."""
    out = []
    K = cfg["topk"]
    for r in logits.tolist():
        E = len(r)
        if cfg.get("score", "softmax") == "sigmoid":
            sel = [1 / (1 + math.exp(-v)) for v in r]
        elif cfg.get("pre_softmax"):
            tot = sum(math.exp(v) for v in r)
            sel = [math.exp(v) / tot for v in r]
        else:
            sel = list(r)
        top = sorted(range(E), key=lambda j: -sel[j])[:K]
        if cfg.get("score", "softmax") == "sigmoid":
            tot = sum(sel[j] for j in top) + 1e-20
            pr = [sel[j] / tot if K > 1 else sel[j] for j in top]
        elif cfg.get("pre_softmax"):
            pr = [sel[j] for j in top]
        else:
            tot = sum(math.exp(r[j]) for j in top)
            pr = [math.exp(r[j]) / tot for j in top]
        out.append([(j, q * (cfg.get("scaling") or 1.0)) for j, q in zip(top, pr)])
    return out


def _megatron_capacity_mask(cfg, probs, idx):
    """The kept choices as Megatron's apply_router_token_dropping finds them: a top-capacity over each
    expert's column of the dense [N, E] probs (probs policy), each sequence-parallel rank over its own rows
    (torch.chunk of the order [s, b], as the rank's input is)."""
    out = []
    for p, ix in zip(probs.chunk(cfg.get("shards", 1)), idx.chunk(cfg.get("shards", 1))):
        N, E = ix.shape[0], cfg["num_experts"]
        dense = torch.zeros(N, E, dtype=p.dtype).scatter(1, ix, p.detach())
        routed = torch.zeros(N, E, dtype=torch.bool).scatter(1, ix, True)
        cap = capacity(cfg, N)
        if cap > N:
            out.append(routed.gather(1, ix))
            continue
        _, ci = dense.topk(cap, dim=0)
        mask = torch.zeros(N, E, dtype=torch.bool).scatter(0, ci, True) & routed
        out.append(mask.gather(1, ix))
    return torch.cat(out)


VARIANTS = {
    "dropless": {},
    "capacity 1.0": {"capacity_factor": 1.0},
    "capacity 1.0, position": {"capacity_factor": 1.0, "drop_policy": "position"},
    "capacity 1.0, 3 shards": {"capacity_factor": 1.0, "shards": 3},
    "capacity 1.0, position, 2 shards": {"capacity_factor": 1.0, "drop_policy": "position", "shards": 2},
    "pre-softmax": {"pre_softmax": True},
    "sigmoid, seq aux, scaling": {"score": "sigmoid", "aux_type": "seq_aux_loss", "scaling": 2.5},
    "shared expert, gate": {"shared_size": 5, "shared_gate": True},
}


def self_check(seed=1):
    """[(name, ok, detail)]: the losses against plain loops, the routing against loops, the capacity
    against Megatron's top-capacity per expert, the MoE layer's and losses' gradients against finite
    differences (torch.autograd.gradcheck, float64)."""
    out = []
    g = torch.Generator().manual_seed(seed)
    B, T, h, E, K, Fe = 2, 12, 6, 4, 2, 3
    for name, extra in VARIANTS.items():
        cfg = {"num_experts": E, "topk": K, "aux_coeff": 1e-2, "z_coeff": 1e-3, **extra}
        logits = torch.randn(T * B, E, generator=g, dtype=torch.float64) * 1.5
        a, z = load_balancing(cfg, logits, B, T).item(), z_loss(cfg, logits).item()
        la, lz = _loop_losses(cfg, logits, B, T)
        out.append(("%s: aux and z losses = plain loops" % name,
                    abs(a - la) <= 1e-14 * la and abs(z - lz) <= 1e-14 * lz, "%.17g %.17g vs %.17g %.17g" % (a, z, la, lz)))
        probs, idx = route(cfg, logits)
        lr = _loop_route(cfg, logits)
        err = max(abs(probs[n, k].item() - lr[n][k][1]) for n in range(T * B) for k in range(K))
        same = all(idx[n, k].item() == lr[n][k][0] for n in range(T * B) for k in range(K))
        out.append(("%s: top-k experts and probs = plain loops" % name, same and err < 1e-14, "max error %.2g" % err))
        if cfg.get("capacity_factor") is not None:
            keep = kept(cfg, probs, idx)
            ndrop = int((~keep).sum())
            if cfg.get("drop_policy", "probs") == "probs":
                ok = bool((keep == _megatron_capacity_mask(cfg, probs, idx)).all())
                out.append(("%s: kept choices = Megatron's top capacity of each expert's probs" % name,
                            ok and ndrop > 0, "%d of %d dropped" % (ndrop, keep.numel())))
            else:
                S = cfg.get("shards", 1)
                cap, ok, L = capacity(cfg, T * B // S), ndrop > 0, T * B // S
                for h in range(S):
                    for e in range(E):
                        ns = [n for n in range(h * L, (h + 1) * L) for k in range(K) if idx[n, k] == e]
                        kn = [n for n in range(h * L, (h + 1) * L) for k in range(K) if idx[n, k] == e and keep[n, k]]
                        ok = ok and kn == ns[:cap]
                out.append(("%s: kept choices = each expert's first capacity tokens of each shard" % name, ok,
                            "%d of %d dropped" % (ndrop, keep.numel())))

        # the layer's output (against a fixed projection) and its losses as functions of every input
        names = ["router.weight"] + ["experts.local_experts.%d.%s.weight" % (j, s) for j in range(E)
                                     for s in ("dense_h_to_4h", "dense_4h_to_h")]
        shapes = [(E, h)] + [s for _ in range(E) for s in ((2 * Fe, h), (h, Fe))]
        if cfg.get("shared_size"):
            names += ["shared_experts.dense_h_to_4h.weight", "shared_experts.dense_4h_to_h.weight",
                      "shared_experts.gate_weight"]
            shapes += [(2 * cfg["shared_size"], h), (h, cfg["shared_size"]), (1, h)]
        ws = [(torch.randn(*s, generator=g, dtype=torch.float64) * (1.0 if n == "router.weight" else 0.5))
              .requires_grad_() for n, s in zip(names, shapes)]
        x = torch.randn(B, T, h, generator=g, dtype=torch.float64).requires_grad_()
        proj = torch.randn(B, T, h, generator=g, dtype=torch.float64)

        def f(x, *w):
            P = {PRE + "encoder.layers.0.mlp." + n: t for n, t in zip(names, w)}
            rec = Record()
            y = moe_layer(cfg, P, 0, x, rec)
            return (y * proj).sum() + sum(rec.extra)
        try:
            ok = torch.autograd.gradcheck(f, (x, *ws), eps=1e-6, atol=1e-7, rtol=1e-5)
            detail = "%d inputs" % (1 + len(ws))
        except Exception as ex:
            ok, detail = False, str(ex)[:300]
        out.append(("%s: gradients = finite differences" % name, ok, detail))
        ones = {**cfg, "aux_coeff": 1.0, "z_coeff": 1.0}      # the losses' gradients alone, not dwarfed
        lg = logits.clone().requires_grad_()
        try:
            ok = torch.autograd.gradcheck(lambda t: load_balancing(ones, t, B, T) + z_loss(ones, t), (lg,),
                                          eps=1e-6, atol=1e-8, rtol=1e-6)
            detail = "coefficients 1"
        except Exception as ex:
            ok, detail = False, str(ex)[:300]
        out.append(("%s: aux and z losses' gradients = finite differences" % name, ok, detail))
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    bad, me = 0, sys.argv[1] if len(sys.argv) > 1 else "moe_torch.py"
    for name, ok, detail in self_check():
        bad += not ok
        print("%s - %s: %s: %s" % ("ok" if ok else "not ok", me, name, detail))
    sys.exit(1 if bad else 0)
