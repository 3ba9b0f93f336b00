"""megatron_split.py: Megatron's tensor/pipeline partitioning of a GPT-2 checkpoint, stated here from the
interop spec (sections 5.1, 5.3, 6.1, 6.2) and not from mt's layout code, as an oracle for resharded
checkpoints. Given the whole tensors of a one-rank checkpoint it says what every (tp, pp) rank must hold:

  - rank directories mp_rank_TT (pp == 1) or mp_rank_TT_PPP; layers split evenly over the stages, their
    indices local to the stage (global = pp_rank * L/pp + i);
  - the vocabulary padded to a multiple of make-vocab-size-divisible-by * tp, the added rows zero; word
    embeddings split by vocabulary rows, rank r holding rows [r V_pad/tp, (r+1) V_pad/tp);
  - query_key_value (rows per head: q, k, v of hn rows each, [np, 3, hn]): rank r holds whole heads
    r np/tp .. (r+1) np/tp - 1, each with its q, k and v rows, weight and bias;
  - dense_h_to_4h (column parallel): output rows split, its bias too;
  - self_attention.dense and dense_4h_to_h (row parallel): input columns split, their biases replicated;
  - LayerNorms replicated; position embeddings on the first stage only; final_layernorm and, with pp > 1,
    word_embeddings_for_head.weight (the tied copy, split like the word embeddings) on the last stage.

    python3 megatron_split.py check WHOLE_DIR SPLIT_DIR TP PP
        WHOLE_DIR, SPLIT_DIR: iter_* directories; compares every rank's model.safetensors (and
        optim.safetensors when both have one: the AdamW moments split like their weights) with the
        oracle's slices, names, shapes and every value.
    python3 megatron_split.py write WHOLE_DIR SPLIT_DIR TP PP
        overwrites the data of every tensor in SPLIT_DIR's rank files with the oracle's slice (the
        headers must name the same tensors and shapes), so that a reader can be checked on slices that
        mt did not write.
"""
import json
import re
import struct
import sys

import numpy as np

DT = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "BF16": "<u2"}


def read_st(path):
    """(header, data offset, {name: ndarray}) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=DT[t["dtype"]]).reshape(t["shape"])
    return head, 8 + n, out


def config(whole_dir):
    meta = json.load(open(whole_dir + "/mp_rank_00/meta.json"))
    a = meta["args"]
    return {k: int(a[k]) for k in ("num-layers", "hidden-size", "num-attention-heads", "ffn-hidden-size",
                                   "make-vocab-size-divisible-by")}


def padded(v, divisible, tp):
    m = divisible * tp
    return (v + m - 1) // m * m


def rank_dir(t, p, pp):
    return "mp_rank_%02d" % t if pp == 1 else "mp_rank_%02d_%03d" % (t, p)


def split(whole, cfg, tp, pp, suffix=""):
    """{rank directory: {name: array}} of the oracle's partition of the whole tensors (names + suffix)."""
    L, h, heads = cfg["num-layers"], cfg["hidden-size"], cfg["num-attention-heads"]
    hn = h // heads
    wte = whole["language_model.embedding.word_embeddings.weight" + suffix]
    vp = padded(wte.shape[0], cfg["make-vocab-size-divisible-by"], tp)
    # the source may be padded for fewer ranks: its rows past the vocabulary are zero as well
    full = np.zeros((vp, h), wte.dtype)
    full[: wte.shape[0]] = wte
    vr = vp // tp
    out = {}
    per = L // pp
    for p in range(pp):
        for t in range(tp):
            r = {}
            if p == 0:
                r["language_model.embedding.word_embeddings.weight"] = full[t * vr:(t + 1) * vr]
                r["language_model.embedding.position_embeddings.weight"] = \
                    whole["language_model.embedding.position_embeddings.weight" + suffix]
            for i in range(per):
                g = "language_model.encoder.layers.%d." % (p * per + i)
                loc = "language_model.encoder.layers.%d." % i
                for ln in ("input_layernorm", "post_attention_layernorm"):
                    for wb in ("weight", "bias"):
                        r[loc + ln + "." + wb] = whole[g + ln + "." + wb + suffix]
                mine = range(t * heads // tp, (t + 1) * heads // tp)
                for wb in ("weight", "bias"):
                    qkv = whole[g + "self_attention.query_key_value." + wb + suffix]
                    # each head's q, k and v rows, the heads of this rank in order
                    rows = [qkv[hd * 3 * hn + s * hn: hd * 3 * hn + (s + 1) * hn] for hd in mine for s in range(3)]
                    r[loc + "self_attention.query_key_value." + wb] = np.concatenate(rows)
                    fc1 = whole[g + "mlp.dense_h_to_4h." + wb + suffix]
                    f = fc1.shape[0] // tp
                    r[loc + "mlp.dense_h_to_4h." + wb] = fc1[t * f:(t + 1) * f]
                for name in ("self_attention.dense", "mlp.dense_4h_to_h"):
                    w = whole[g + name + ".weight" + suffix]
                    c = w.shape[1] // tp
                    r[loc + name + ".weight"] = w[:, t * c:(t + 1) * c]
                    r[loc + name + ".bias"] = whole[g + name + ".bias" + suffix]
            if p == pp - 1:
                for wb in ("weight", "bias"):
                    r["language_model.encoder.final_layernorm." + wb] = \
                        whole["language_model.encoder.final_layernorm." + wb + suffix]
                if pp > 1:
                    r["word_embeddings_for_head.weight"] = full[t * vr:(t + 1) * vr]
            out[rank_dir(t, p, pp)] = {k + suffix: v for k, v in r.items()}
    return out


def expected(whole_dir, tp, pp, fname):
    cfg = config(whole_dir)
    _, _, whole = read_st(whole_dir + "/mp_rank_00/" + fname)
    if fname == "model.safetensors":
        return split(whole, cfg, tp, pp)
    out = {}
    for suf in (".exp_avg", ".exp_avg_sq"):
        for rd, ts in split(whole, cfg, tp, pp, suf).items():
            out.setdefault(rd, {}).update(ts)
    return out


def check(whole_dir, split_dir, tp, pp):
    import os
    files = ["model.safetensors"]
    if os.path.exists(whole_dir + "/mp_rank_00/optim.safetensors") and \
            os.path.exists(split_dir + "/" + rank_dir(0, 0, pp) + "/optim.safetensors"):
        files.append("optim.safetensors")
    n = 0
    for fname in files:
        want = expected(whole_dir, tp, pp, fname)
        for rd, ts in sorted(want.items()):
            _, _, got = read_st(split_dir + "/" + rd + "/" + fname)
            if sorted(got) != sorted(ts):
                missing, extra = sorted(set(ts) - set(got)), sorted(set(got) - set(ts))
                sys.exit("%s/%s: tensors missing %s, extra %s" % (rd, fname, missing[:4], extra[:4]))
            for k, v in ts.items():
                if got[k].shape != v.shape:
                    sys.exit("%s/%s: %s has shape %s, Megatron's partition %s" % (rd, fname, k, got[k].shape, v.shape))
                if not np.array_equal(got[k], v):
                    bad = np.argwhere(got[k] != v)[0]
                    sys.exit("%s/%s: %s differs from Megatron's slice at %s (%r, want %r)" %
                             (rd, fname, k, tuple(bad), got[k][tuple(bad)], v[tuple(bad)]))
                n += 1
    print("%d tensors in %d ranks%s" % (n, tp * pp, ", with the AdamW moments" if len(files) > 1 else ""))


def write(whole_dir, split_dir, tp, pp):
    want = expected(whole_dir, tp, pp, "model.safetensors")
    for rd, ts in want.items():
        path = split_dir + "/" + rd + "/model.safetensors"
        head, base, got = read_st(path)
        b = bytearray(open(path, "rb").read())
        for k, v in ts.items():
            assert got[k].shape == v.shape and got[k].dtype == v.dtype, (rd, k)
            a, e = head[k]["data_offsets"]
            b[base + a: base + e] = np.ascontiguousarray(v).tobytes()
        open(path, "wb").write(bytes(b))


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] not in ("check", "write") or not re.match(r"^\d+$", sys.argv[4] + sys.argv[5]):
        sys.exit(__doc__)
    fn = check if sys.argv[1] == "check" else write
    fn(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
