#!/usr/bin/env bash
# model-torch.sh: the C GPT model against the independent float64 PyTorch reference (tests/oracle/gpt_torch.py)
# on a tiny config (L=2, h=32, 4 heads, T=16, B=3, vocab 67 padded to 128), in evaluation mode and in
# training mode with dropout (the reference rebuilds the masks from kernels.h's counter hash).
# test_model --dump writes the C side; checked here:
#   - the tensor table (names, offsets, shapes, no_decay) equals Megatron's legacy layout;
#   - the initial parameters equal Megatron's init drawn from numpy's RandomState(1234), bit for bit;
#   - loss and per-token losses agree to 1e-4 relative;
#   - every tensor's gradient agrees: max|g_C - g_ref| / max|g_ref| < 1e-4 (the error relative to the
#     tensor's largest gradient entry; tensors whose reference gradient is all zero must be zero);
#   - 10 AdamW steps (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on decay tensors only, torch's
#     AdamW in float64) give the same loss at every step and after the last to 1e-4 relative.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
BIN=$T_TOP/${MT_BUILD:-build}/tests/test_model
if ! [ -x "$PY" ] || ! $PY -c 'import numpy, torch' 2>/dev/null; then
    t_skip "torch reference" "no /usr/bin/python3 with numpy and torch (make deps installs python3-torch)"; exit 0
fi
[ -x "$BIN" ] || { t_fail "torch reference" "$BIN not built"; exit 0; }
if ! "$BIN" --dump "$T_TMP/dump" >"$T_TMP/dump.out" 2>&1; then
    t_fail "dump" "test_model --dump failed: $(head -c 300 "$T_TMP/dump.out")"; exit 0
fi
$PY - "$T_TMP/dump" "$T_TOP/tests/oracle" "$T_FILE" <<'PYEOF'
import os, sys
import numpy as np
import torch

dump, oracle, me = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, oracle)
import gpt_torch as ref

TOL = 1e-4

def report(name, ok, detail):
    print("%s - %s: %s: %s" % ("ok" if ok else "not ok", me, name, detail))

def check(variant):
    d = os.path.join(dump, variant)
    meta = dict(line.split(None, 1) for line in open(os.path.join(d, "meta.txt")) if line.strip())
    ints = ("num_layers hidden_size num_heads ffn_hidden_size seq_length max_position_embeddings vocab_size "
            "padded_vocab_size exact_gelu seed training key B T steps").split()
    cfg = {k: (int(v) if k in ints else float(v)) for k, v in meta.items()}
    if cfg["exact_gelu"]:
        report(variant + ": config", False, "the reference only implements the tanh GeLU"); return
    table = [l.split() for l in open(os.path.join(d, "table.txt"))]
    want, off, ok, why = ref.layout(cfg), 0, True, ""
    if len(table) != len(want):
        ok, why = False, "%d tensors, expected %d" % (len(table), len(want))
    for row, (name, shape, nd) in zip(table, want):
        got = (row[0], int(row[1]), int(row[2]), int(row[3]), tuple(int(x) for x in row[4:4 + len(shape)]), bool(int(row[6])))
        exp = (name, off, int(np.prod(shape)), len(shape), shape, nd)
        if got != exp and ok:
            ok, why = False, "%r, expected %r" % (got, exp)
        off += int(np.prod(shape))
    report(variant + ": tensor table", ok, why or "%d tensors, %d parameters, Megatron legacy names" % (len(want), off))
    if not ok: return

    p0 = np.load(os.path.join(d, "params.npy"))
    init = ref.init_params(cfg, cfg["seed"])
    nbad = int(np.sum(p0 != init)) if p0.shape == init.shape else -1
    report(variant + ": init", nbad == 0, "identical to RandomState(%d) normals" % cfg["seed"] if nbad == 0 else
           "%d of %d values differ" % (nbad, init.size))

    tokens = torch.tensor(np.load(os.path.join(d, "tokens.npy")), dtype=torch.long)
    targets = torch.tensor(np.load(os.path.join(d, "targets.npy")), dtype=torch.long)
    mask = torch.tensor(np.load(os.path.join(d, "mask.npy")), dtype=torch.float64)
    key = cfg["key"] if cfg["training"] else None
    drop = ref.Dropout(key, cfg["hidden_dropout"], cfg["attention_dropout"])
    P = ref.unflatten(cfg, p0)
    loss, tl = ref.forward(cfg, P, tokens, targets, mask, drop)
    loss.backward()
    c_loss, c_tl = cfg["loss"], np.load(os.path.join(d, "tok_losses.npy"))
    rl = abs(c_loss - loss.item()) / abs(loss.item())
    rt = float(np.max(np.abs(c_tl - tl.detach().numpy())) / np.max(np.abs(tl.detach().numpy())))
    report(variant + ": loss", rl < TOL and rt < TOL,
           "C %.9g, torch %.9g: relative error %.2e, per-token %.2e" % (c_loss, loss.item(), rl, rt))

    g = np.load(os.path.join(d, "grads.npy"))
    worst, worst_name, bad, o = 0.0, "", [], 0
    for name, shape, _ in ref.layout(cfg):
        n = int(np.prod(shape))
        gc, gr = g[o:o + n].astype(np.float64), P[name].grad.numpy().reshape(-1)
        o += n
        scale = np.max(np.abs(gr))
        err = np.max(np.abs(gc - gr))
        if scale == 0:
            if err != 0: bad.append("%s: reference gradient 0, C max %.3g" % (name, err))
            continue
        r = err / scale
        if r > worst: worst, worst_name = r, name
        if r >= TOL: bad.append("%s: %.2e" % (name, r))
    report(variant + ": gradients", not bad, "; ".join(bad[:4]) if bad else
           "every tensor within %.0e of its largest entry (worst %.2e, %s)" % (TOL, worst, worst_name.replace("language_model.", "")))

    # AdamW steps from the same initial parameters on the dumped batches.
    S = cfg["steps"]
    st = np.load(os.path.join(d, "step_tokens.npy")); sg = np.load(os.path.join(d, "step_targets.npy"))
    sm = np.load(os.path.join(d, "step_mask.npy")); c_losses = np.load(os.path.join(d, "step_losses.npy"))
    P = ref.unflatten(cfg, p0)
    names = ref.layout(cfg)
    groups = [{"params": [P[n] for n, _, nd in names if not nd], "weight_decay": cfg["weight_decay"]},
              {"params": [P[n] for n, _, nd in names if nd], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["adam_eps"])
    r_losses = []
    for s in range(S):
        opt.zero_grad()
        drop = ref.Dropout(cfg["key"] + s if cfg["training"] else None, cfg["hidden_dropout"], cfg["attention_dropout"])
        loss, _ = ref.forward(cfg, P, torch.tensor(st[s], dtype=torch.long), torch.tensor(sg[s], dtype=torch.long),
                              torch.tensor(sm[s], dtype=torch.float64), drop)
        loss.backward()
        opt.step()
        r_losses.append(loss.item())
    with torch.no_grad():
        loss, _ = ref.forward(cfg, P, tokens, targets, mask, ref.Dropout(None, 0, 0))
    r_losses.append(loss.item())
    r_losses = np.array(r_losses)
    rel = np.abs(c_losses - r_losses) / np.abs(r_losses)
    report(variant + ": adamw", c_losses.shape == r_losses.shape and np.all(rel < TOL),
           "%d steps, loss %.6f -> %.6f, worst relative error %.2e" % (S, r_losses[0], r_losses[-1], rel.max()))

torch.set_num_threads(1)
for variant in ("eval", "drop"):
    try:
        check(variant)
    except Exception as ex:
        report(variant, False, repr(ex))
PYEOF
