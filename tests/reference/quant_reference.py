#!/usr/bin/env python3
"""Writes tests/fixtures/quant_cases.bin: reference data for tests/test_quant.c.

Run from the repository root:  python3 tests/reference/quant_reference.py [--seed N]

Independent references:
  * the PyPI package `gguf` (gguf.quants: numpy implementations of the GGML block
    formats) dequantizes random valid blocks of every type it knows and quantizes
    random floats for the types it can quantize (F16 via numpy's float16, BF16,
    Q4_0, Q4_1, Q5_0, Q5_1, Q8_0); gguf.GGML_QUANT_SIZES gives the type table (but
    for Q8_1, see TYPE_SIZES).
  * the PyPI package `ggml-python` (it builds ggml's own C library) gives what gguf
    lacks: ggml's reference quantizers for Q8_1 and Q8_K (quantize_row_*_ref), its
    model-file quantizers for IQ4_NL and IQ4_XS (ggml_quantize_chunk, no importance
    matrix), and its dot products on random rows. Without it those records are left
    out (the C test then says so).
  * Q8_1 and Q8_K dequantization (x = d * q), which gguf lacks, is written out here
    with numpy and checked against ggml's to_float when ggml is present.

Record layout (little endian): file header "STQF", u32 version, u32 record count;
each record: u32 kind, u32 ggml type, u32 n (elements), u32 nbytes, u32 aux, then
  kind 1 DEQUANT  bytes[nbytes] block data, f32[n] its values
  kind 2 QUANT    f32[n] input, bytes[nbytes] the quantized blocks
  kind 3 SIZES    n entries of (u32 type, u32 block size, u32 type size, char name[16])
  kind 4 VECDOT   bytes[nbytes] weight row, f32[n] activations, bytes[aux] activation
                  row quantized by ggml, f32 ggml's dot product
"""
import argparse
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = "tests/fixtures/quant_cases.bin"

DEQUANT, QUANT, SIZES, VECDOT = 1, 2, 3, 4

# Byte offsets of the half-precision fields of each block type (facts of the format).
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q8_1: [0, 2],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0],
}
WEIGHT_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.IQ4_NL,
                T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_XS]


def record(kind, qtype, n, nbytes, aux, payload):
    return struct.pack("<5I", kind, int(qtype), n, nbytes, aux) + payload


def random_finite_halves(rng, count, lo_exp=None, hi_exp=None):
    """Random finite binary16 bit patterns: any pattern, or |x| in [2^lo, 2^hi) with a random sign."""
    if lo_exp is None:
        h = rng.integers(0, 1 << 16, count, dtype=np.uint32).astype(np.uint16)
        exp = (h >> 10) & 0x1F
        return np.where(exp == 0x1F, h & 0x83FF, h).astype(np.uint16)  # inf/nan -> exponent 0
    mag = np.exp2(rng.uniform(lo_exp, hi_exp, count)) * rng.choice([-1.0, 1.0], count)
    return mag.astype(np.float16).view(np.uint16)


# Block and type sizes: gguf.GGML_QUANT_SIZES, except where ggml's C headers (the
# format's definition) disagree: gguf still lists Q8_1 at 40 bytes, the layout with
# float32 d and s that ggml replaced by two halves (36 bytes, ggml-common.h).
TYPE_SIZES = dict(gguf.GGML_QUANT_SIZES)
TYPE_SIZES[T.Q8_1] = (32, 36)


def random_blocks(rng, qtype, nblocks, lo_exp=None, hi_exp=None):
    """Random bytes for nblocks blocks of qtype, with its scale fields finite."""
    bs, ts = TYPE_SIZES[qtype]
    raw = rng.integers(0, 256, (nblocks, ts), dtype=np.uint32).astype(np.uint8)
    for off in HALF_FIELDS.get(qtype, []):
        raw[:, off:off + 2] = random_finite_halves(rng, nblocks, lo_exp, hi_exp).view(np.uint8).reshape(nblocks, 2)
    if qtype == T.Q8_K:  # a float32 d
        lo, hi = (-20, 10) if lo_exp is None else (lo_exp, hi_exp)
        d = (np.exp2(rng.uniform(lo, hi, nblocks)) * rng.choice([-1.0, 1.0], nblocks)).astype(np.float32)
        raw[:, 0:4] = d.view(np.uint8).reshape(nblocks, 4)
    return raw.reshape(-1)


def dequant_numpy_q8(qtype, raw):
    """x = d * q for Q8_1 (half d) and Q8_K (float d); gguf has no class for these."""
    bs, ts = TYPE_SIZES[qtype]
    b = raw.reshape(-1, ts)
    if qtype == T.Q8_1:
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        q = b[:, 4:36].copy().view(np.int8).astype(np.float32)
    else:
        d = b[:, 0:4].copy().view(np.float32)
        q = b[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (d * q).astype(np.float32).reshape(-1)


def random_floats(rng, nblocks, bs):
    """Rows of nblocks blocks with per-block scales spanning decades, plus edge blocks."""
    x = rng.standard_normal((nblocks, bs)).astype(np.float32)
    x *= np.exp2(rng.uniform(-12, 8, (nblocks, 1))).astype(np.float32)
    x[rng.random((nblocks, bs)) < 0.02] *= 20  # outliers
    if nblocks >= 8:
        x[1] = 0                        # all zero
        x[2] = 0.75                     # constant
        x[3] = -np.abs(x[3])            # all negative
        x[4, 5] = -np.abs(x[4]).max() * 1.5  # negative maximum magnitude
        x[4, 9] = -x[4, 5]              # tie in magnitude: the first one counts
        x[5] = np.round(x[5] * 4) / 4   # many exact multiples
    # no -0.0: which of two equal zeros is the block minimum is ggml's scan order
    # (the first), numpy's min may return the other; adding +0.0 makes every zero +0.0
    return (x + np.float32(0)).reshape(-1)


def fp16_inputs(rng):
    """float32 inputs for f32 -> f16 rounding: random over the half range, exact ties and neighbours."""
    r = np.exp2(rng.uniform(-30, 17, 4000)) * rng.choice([-1.0, 1.0], 4000)
    h = rng.integers(0, 0x7BFF, 1000).astype(np.uint16)  # finite halves below the largest
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).view(np.float16).astype(np.float64)
    ties = ((lo + hi) / 2).astype(np.float32)  # exact in float32 (12 significant bits)
    near = np.concatenate([np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 65536, 1e10,
                        2.0**-24, 2.0**-25, 2.0**-25 * 1.0000001, 3 * 2.0**-26, 2.0**-26, 2.0**-14,
                        2.0**-14 - 2.0**-25, 1e-30, 6.1e-5, -65520, -2.0**-25], dtype=np.float64)
    return np.concatenate([r, ties, -ties, near, special]).astype(np.float32)


def bf16_inputs(rng):
    bits = rng.integers(0, 1 << 32, 2000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 1 << 16, 500, dtype=np.uint32) << 16 | 0x8000).astype(np.uint32)
    special = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7F7FFFFF,
                        0x7F7F8000, 0x00000001, 0x80008000, 0x3F808000, 0x3F818000], dtype=np.uint32)
    return np.concatenate([bits, ties, special]).view(np.float32)


def load_ggml():
    try:
        import ggml  # PyPI ggml-python: ggml's C library
        ggml.ggml_cpu_init()  # fills the CPU backend's half -> float table its dot products use
        return ggml
    except ImportError:
        print("ggml-python not installed: Q8_1/Q8_K/IQ4 quantize and vec_dot records left out", file=sys.stderr)
        return None


def ggml_quantize(ggml, qtype, x):
    import ctypes
    bs, ts = TYPE_SIZES[qtype]
    out = (ctypes.c_uint8 * (len(x) // bs * ts))()
    xc = np.ascontiguousarray(x, dtype=np.float32)
    xp = xc.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    if qtype in (T.Q8_0, T.Q8_1, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):
        ggml.ggml_get_type_traits(int(qtype)).contents.from_float_ref(xp, ctypes.cast(out, ctypes.c_void_p), len(x))
    elif qtype == T.Q8_K:  # only the CPU traits have it; on x86 that is quantize_row_q8_K_ref
        ggml.ggml_get_type_traits_cpu(int(qtype)).contents.from_float(xp, ctypes.cast(out, ctypes.c_void_p), len(x))
    else:
        ggml.ggml_quantize_chunk(int(qtype), xp, ctypes.cast(out, ctypes.c_void_p), 0, 1, len(x), None)
    return np.frombuffer(bytes(out), dtype=np.uint8)


def ggml_dequantize(ggml, qtype, raw):
    import ctypes
    bs, ts = TYPE_SIZES[qtype]
    n = len(raw) // ts * bs
    out = np.zeros(n, dtype=np.float32)
    buf = (ctypes.c_uint8 * len(raw)).from_buffer_copy(raw.tobytes())
    ggml.ggml_get_type_traits(int(qtype)).contents.to_float(
        ctypes.cast(buf, ctypes.c_void_p), out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n)
    return out


def ggml_vec_dot(ggml, qtype, n, w, a):
    import ctypes
    wb = (ctypes.c_uint8 * len(w)).from_buffer_copy(w.tobytes())
    ab = (ctypes.c_uint8 * len(a)).from_buffer_copy(a.tobytes())
    s = ctypes.c_float(0)
    ggml.ggml_get_type_traits_cpu(int(qtype)).contents.vec_dot(
        n, ctypes.byref(s), 0, ctypes.cast(wb, ctypes.c_void_p), 0, ctypes.cast(ab, ctypes.c_void_p), 0, 1)
    return np.float32(s.value)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    ggml = load_ggml()
    recs = []

    # --- type table ---
    entries = b""
    count = 0
    if ggml is not None:  # ggml's own table agrees with TYPE_SIZES on every type below 40
        for t, (bs, ts) in TYPE_SIZES.items():
            tr = ggml.ggml_get_type_traits(int(t)).contents if int(t) < 40 else None
            assert tr is None or (tr.blck_size, tr.type_size) == (bs, ts), (t, tr.blck_size, tr.type_size)
    for t, (bs, ts) in sorted(TYPE_SIZES.items(), key=lambda kv: int(kv[0])):
        if int(t) >= 40:  # numbers past the ones Strata's enum knows
            continue
        entries += struct.pack("<3I16s", int(t), bs, ts, t.name.encode())
        count += 1
    recs.append(record(SIZES, 0, count, 0, 0, entries))

    # --- dequantization of random valid blocks ---
    for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.IQ4_NL, T.Q8_1,
                  T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_XS, T.Q8_K]:
        bs, ts = TYPE_SIZES[qtype]
        nblocks = 16 if bs == 32 else 6
        raw = random_blocks(rng, qtype, nblocks)
        if qtype in (T.Q8_1, T.Q8_K):
            vals = dequant_numpy_q8(qtype, raw)
            if ggml is not None and ggml.ggml_get_type_traits(int(qtype)).contents.to_float:
                assert np.array_equal(vals.view(np.uint32), ggml_dequantize(ggml, qtype, raw).view(np.uint32))
        else:
            vals = quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        recs.append(record(DEQUANT, qtype, len(vals), len(raw), 0, raw.tobytes() + vals.tobytes()))
    h = rng.integers(0, 1 << 16, 2048, dtype=np.uint32).astype(np.uint16)
    recs.append(record(DEQUANT, T.F16, 2048, 4096, 0,
                       h.tobytes() + quants.dequantize(h.view(np.uint8), T.F16).astype(np.float32).tobytes()))
    recs.append(record(DEQUANT, T.BF16, 2048, 4096, 0,
                       h.tobytes() + quants.dequantize(h.view(np.uint8), T.BF16).astype(np.float32).tobytes()))

    # --- quantization by gguf ---
    for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]:
        x = random_floats(rng, 40, 32)
        q = quants.quantize(x.reshape(1, -1), qtype).reshape(-1)
        if ggml is not None and qtype in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):  # the two references agree
            assert np.array_equal(q, ggml_quantize(ggml, qtype, x)), qtype
        recs.append(record(QUANT, qtype, len(x), len(q), 0, x.tobytes() + q.tobytes()))
    x = fp16_inputs(rng)
    with np.errstate(over="ignore"):  # values past the half range round to inf, as they must
        q = quants.quantize(x, T.F16).view(np.uint8)
    recs.append(record(QUANT, T.F16, len(x), len(q), 0, x.tobytes() + q.tobytes()))
    x = bf16_inputs(rng)
    q = quants.quantize(x, T.BF16).view(np.uint8).reshape(-1)
    recs.append(record(QUANT, T.BF16, len(x), len(q), 0, x.tobytes() + q.tobytes()))

    if ggml is not None:
        # --- quantization by ggml (types gguf cannot quantize) ---
        for qtype, nblocks in [(T.Q8_1, 40), (T.IQ4_NL, 40), (T.Q8_K, 6), (T.IQ4_XS, 6)]:
            bs, _ = TYPE_SIZES[qtype]
            x = random_floats(rng, nblocks * bs // 32, 32)
            if bs == 256:
                x.reshape(nblocks, bs)[1] += 1e-3  # ggml leaves sums of an all-zero Q8_K block unset
            q = ggml_quantize(ggml, qtype, x)
            recs.append(record(QUANT, qtype, len(x), len(q), 0, x.tobytes() + q.tobytes()))

        # --- ggml's dot products on random rows ---
        for qtype in WEIGHT_TYPES:
            vdt = T(ggml.ggml_get_type_traits_cpu(int(qtype)).contents.vec_dot_type)
            bs, _ = TYPE_SIZES[qtype]
            for n in ((96, 1056) if bs == 32 else (256, 768)):  # odd block counts included
                w = random_blocks(rng, qtype, n // bs, -10, -2)
                a = (rng.standard_normal(n) * np.exp2(rng.uniform(-4, 4))).astype(np.float32)
                aq = ggml_quantize(ggml, vdt, a)
                s = ggml_vec_dot(ggml, qtype, n, w, aq)
                recs.append(record(VECDOT, qtype, n, len(w), len(aq),
                                   w.tobytes() + a.tobytes() + aq.tobytes() + s.tobytes()))

    data = b"STQF" + struct.pack("<2I", 1, len(recs)) + b"".join(recs)
    with open(OUT, "wb") as f:
        f.write(data)
    from importlib.metadata import version
    print(f"wrote {OUT}: {len(recs)} records, {len(data)} bytes (seed {args.seed}, gguf {version('gguf')}, "
          f"numpy {np.__version__}, ggml-python {version('ggml-python') if ggml else 'absent'})")


if __name__ == "__main__":
    main()
