# fp8_ref.py: an independent numpy reference of the FP8 emulation (mtk_fp8_qdq, kernels.h), written from
# the formats' bit layouts (OCP FP8; Transformer Engine's E4M3 is the fn variant: bias 7, S.1111.111 the
# only NaN, no infinities, max 448; E5M2: bias 15, IEEE-like, max 57344) and TE's cast: round to nearest,
# ties to even, saturating beyond the max (__NV_SATFINITE), NaN to NaN; the value multiplied by the fp32
# scale first and by the fp32 reciprocal of the scale after. Checks the outputs test_kernels --dump-fp8
# wrote (DIR) bit for bit, and the amax (max |x| before the scale, NaNs left out).
# Usage: fp8_ref.py DIR LABEL   (prints TAP lines)
import sys

import numpy as np


def code_values(ebits):
    """The values of the positive codes 0..127 in code order, from the layout: exponent field, mantissa field."""
    mbits, bias = 7 - ebits, (1 << (ebits - 1)) - 1
    c = np.arange(128)
    e, m = c >> mbits, c & ((1 << mbits) - 1)
    v = np.where(e == 0, m * 2.0 ** (1 - bias - mbits), ((1 << mbits) + m) * 2.0 ** (e - bias - mbits))
    if ebits == 4:
        v[(e == 15) & (m == 7)] = np.nan
    else:
        v[e == 31] = np.where(m[e == 31] == 0, np.inf, np.nan)
    return v


def qdq(x, s, ebits):
    vals = code_values(ebits)
    fin = np.isfinite(vals)
    table = vals[fin]                     # positive finite values, increasing with the code (index = code)
    assert np.all(np.diff(table) > 0) and np.flatnonzero(fin)[-1] == len(table) - 1
    vmax = table[-1]
    s32 = np.float32(s)
    v = (x.astype(np.float32) * s32).astype(np.float64)            # fp32 product
    inv = np.float64(np.float32(1.0) / s32)                          # fp32 reciprocal
    a = np.abs(v)
    with np.errstate(invalid="ignore"):
        j = np.clip(np.searchsorted(table, np.where(np.isnan(a), 0, a), side="right") - 1, 0, len(table) - 2)
        lo, hi = table[j], table[j + 1]
        r = np.where(a - lo < hi - a, lo, np.where(a - lo > hi - a, hi, np.where(j % 2 == 0, lo, hi)))
        r = np.where(a >= vmax, vmax, r)
        r = np.copysign(r, v)
        r = np.where(np.isnan(v), np.nan, r)
    return (r * inv).astype(np.float32)  # exact in double, one rounding to fp32


def main():
    np.seterr(all="ignore")   # overflows to inf, NaN inputs: expected
    d, me = sys.argv[1], sys.argv[2]
    x = np.fromfile(d + "/x.f32", dtype="<f4")
    scales = [float(l) for l in open(d + "/scales.txt") if l.strip()]
    assert code_values(4)[126] == 448 and code_values(5)[123] == 57344
    bad = 0
    for fmt, ebits in (("e4m3", 4), ("e5m2", 5)):
        for i, s in enumerate(scales):
            got = np.fromfile("%s/y_%s_%d.f32" % (d, fmt, i), dtype="<f4")
            want = qdq(x, s, ebits)
            same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
            if not same.all():
                k = np.flatnonzero(~same)[0]
                print("not ok - %s: %s scale %g: %d of %d differ, first x %r: %r, expected %r"
                      % (me, fmt, s, (~same).sum(), len(x), float(x[k]), float(got[k]), float(want[k])))
                bad += 1
            else:
                print("ok - %s: %s scale %g: %d values bit for bit" % (me, fmt, s, len(x)))
            amax = np.fromfile("%s/amax_%s_%d.f32" % (d, fmt, i), dtype="<f4")[0]
            want_amax = np.nanmax(np.abs(x.astype(np.float64)))
            if amax != want_amax:
                print("not ok - %s: %s scale %g: amax %r, expected %r" % (me, fmt, s, float(amax), want_amax))
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
