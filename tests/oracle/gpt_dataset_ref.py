# gpt_dataset_ref.py: an independent numpy reference of Megatron's GPT dataset index algorithms (core
# gpt_dataset.py / utils.py / helpers.cpp and blended datasets), written from the interoperability spec:
# split rounding (core and legacy), epochs and final-epoch separation, document index with
# numpy RandomState shuffles, build_sample_idx, shuffle index, core >= v0.12 blend sizes,
# build_blending_indices and the exhaustive variant, and sample fetch. Used by the pipeline tests.
import math, re
import numpy as np


def split_core(split, n):
    w = [float(x) for x in re.findall(r"[.0-9]+", split)]
    w = w + [0.0] * (3 - len(w))
    a = np.array(w, dtype=np.float64)
    w = (a / np.sum(a)).tolist()
    ends = [0]
    for x in w:
        ends.append(ends[-1] + x)
    out = []
    for i in range(3):
        if ends[i + 1] - ends[i] == 0:
            out.append(None)
        else:
            out.append((int(round(ends[i] * float(n))), int(round(ends[i + 1] * float(n)))))
    return out

def split_legacy(split, n):
    if "," in split:
        s = [float(x) for x in split.split(",")]
    elif "/" in split:
        s = [float(x) for x in split.split("/")]
    else:
        s = [float(split)]
    while len(s) < 3:
        s.append(0.)
    s = s[:3]
    tot = sum(s)
    s = [x / tot for x in s]
    idx = [0]
    for i, x in enumerate(s):
        idx.append(idx[i] + int(round(x * float(n))))
    diff = idx[-1] - n
    for i in range(1, len(idx)):
        idx[i] -= diff
    return [(idx[i], idx[i + 1]) for i in range(3)]

def doc_index(docs, epochs, rs, separate):
    if not separate or epochs == 1:
        d = np.mgrid[0:epochs, 0:len(docs)][1]
        d[:] = docs
        d = d.reshape(-1).astype(np.int32)
        rs.shuffle(d)
        return d
    return np.concatenate((doc_index(docs, epochs - 1, rs, False), doc_index(docs, 1, rs, False)))

def sample_index(sizes, doc, L, epochs, T, drop_last, E):
    if drop_last:  # C++ integer division truncates toward zero (0 samples, not -1, for an empty split)
        ns = (epochs * T - E) // L if epochs * T >= E else -((E - epochs * T) // L)
    else:
        ns = int(math.ceil(np.float32(epochs * T - E) / np.float32(L)))
    big = max(doc.shape[0], int(sizes.max()) if len(sizes) else 0) > 2**31 - 1
    out = np.zeros((ns + 1, 2), dtype=np.int64 if big else np.int32)
    sz = sizes.tolist(); dl = doc.tolist()
    di = 0; off = 0; k = 1
    while k <= ns:
        need = L + E
        while need != 0:
            here = sz[dl[di]] - off
            need -= here
            if need <= 0:
                off += need + here - E
                need = 0
            else:
                if di == len(dl) - 1:
                    assert k == ns
                    off = sz[dl[di]] - E
                    break
                di += 1; off = 0
        out[k] = (di, off)
        k += 1
    return out

def shuffle_index(n_first, total, rs):
    dt = np.int64 if total >= np.iinfo(np.uint32).max - 1 else np.uint32
    a = np.arange(0, n_first, dtype=dt)
    rs.shuffle(a)
    if n_first == total:
        return a
    b = np.arange(n_first, total, dtype=dt)
    rs.shuffle(b)
    return np.concatenate((a, b))

def gpt(sizes, lo, hi, n, L, E, seed, drop_last):
    """n None = one epoch. Returns (plan, doc, sample, shuffle)."""
    docs = np.arange(lo, hi, dtype=np.int32)
    T = int(np.sum(sizes[docs])) if hi > lo else 0
    epochs = 1
    if n is not None:
        tot = T
        if T == 0 and n * L + E > 0:
            raise ValueError("no tokens")
        while tot < n * L + E:
            epochs += 1; tot += T
    if epochs == 1:
        sep = False
    else:
        before = ((epochs - 1) * T - E) // L
        last = n - before
        per = (T - E) // L
        assert 0 <= last <= per + 1
        sep = last < int(0.80 * per)
    rs = np.random.RandomState(seed)
    d = doc_index(docs, epochs, rs, sep)
    s = sample_index(sizes, d, L, epochs, T, drop_last, E)
    total = s.shape[0] - 1
    sh = shuffle_index(before if sep else total, total, rs)
    return (T, epochs, int(sep), total), d, s, sh

def blend_sizes(ws, n, surplus):
    w = np.array(ws, dtype=np.float64)
    w = (w / np.sum(w)).tolist()
    per = [int(math.ceil(math.ceil(n * x) * (1 + surplus))) for x in w]
    size = sum(int(math.ceil(n * x)) for x in w)
    return w, per, size

def blend_indices(w, size):
    cur = [0] * len(w)
    di = np.zeros(size, dtype=np.int16); dsi = np.zeros(size, dtype=np.int64)
    for s in range(size):
        x = max(float(s), 1.0)
        errs = [w[k] * x - cur[k] for k in range(len(w))]
        best = errs.index(max(errs))
        di[s] = best; dsi[s] = cur[best]; cur[best] += 1
    return di, dsi, cur

def exhaustive(counts):
    total = sum(counts)
    w = [c / float(total) for c in counts]
    cur = [0] * len(counts)
    live = [k for k in range(len(counts)) if counts[k] > 0]
    di, dsi = [], []
    s = 0
    while live:
        x = max(float(s), 1.0)
        best = max(live, key=lambda k: (w[k] * x - cur[k], -k))
        di.append(best); dsi.append(cur[best]); cur[best] += 1
        if cur[best] == counts[best]:
            live.remove(best)
        s += 1
    return np.array(di, dtype=np.int16), np.array(dsi, dtype=np.int64)

def fetch(tokens, ptr, sizes, doc, samp, shuf, L, E, i):
    j = int(shuf[i]); d0, o0 = samp[j]; d1, o1 = samp[j + 1]
    if d0 == d1:
        s = int(doc[d0]); parts = [tokens[ptr[s] + o0: ptr[s] + min(o1 + E, sizes[s])]]
    else:
        s = int(doc[d0]); parts = [tokens[ptr[s] + o0: ptr[s] + sizes[s]]]
        for d in range(d0 + 1, d1):
            s = int(doc[d]); parts.append(tokens[ptr[s]: ptr[s] + sizes[s]])
        s = int(doc[d1]); parts.append(tokens[ptr[s]: ptr[s] + min(o1 + E, sizes[s])])
    t = np.concatenate(parts).astype(np.int64)
    return np.concatenate((t, np.full(L + E - len(t), -1, dtype=np.int64)))

