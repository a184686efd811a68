"""A plain encoder for llama.cpp's Q2_K, Q3_K, Q4_K, Q5_K and Q6_K blocks, for tests only.

The `gguf` package decodes these types but does not encode them, so the GGUF tests encode
here and decode with `gguf.quants.dequantize`: the engine is then judged against llama.cpp's
own reading of the bytes, never against this file's. The scales are chosen simply (each
sub-block's range, then the sub-block scales rounded to 6 or 8 bits against their maximum);
llama.cpp searches for better ones, which changes the values, not the format.

Layouts (256 values a super-block, little-endian halves):
  Q4_K  d, dmin, 12 bytes of eight 6-bit scales and mins, 128 bytes of nibbles     (144)
  Q5_K  the same, then 32 bytes of fifth bits before the nibbles                      (176)
  Q6_K  128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, d             (210)
  Q2_K  16 bytes of 4-bit scale and min pairs, 64 bytes of 2-bit quants, d, dmin         (84)
  Q3_K  32 bytes of third bits, 64 of 2-bit quants, 12 of 6-bit scales, d               (110)
"""
from __future__ import annotations

import numpy as np


def _halves(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float16).reshape(-1, 1).view(np.uint8)


def _pack_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins per super-block (n, 8) -> (n, 12) bytes."""
    out = np.zeros((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    return out


def _affine(x: np.ndarray, levels: int) -> tuple[np.ndarray, ...]:
    """Sub-blocks of 32 as (d * sc) * q - dmin * m, q in 0..levels; x is (n, 8, 32)."""
    lo = np.minimum(x.min(axis=2), 0.0)
    step = (x.max(axis=2) - lo) / levels
    d = step.max(axis=1) / 63
    dmin = -lo.min(axis=1) / 63
    d = np.asarray(np.where(d > 0, d, 1.0), np.float16).astype(np.float32)
    dmin = np.asarray(np.where(dmin > 0, dmin, 1.0), np.float16).astype(np.float32)
    sc = np.clip(np.rint(step / d[:, None]), 1, 63).astype(np.uint8)
    m = np.clip(np.rint(-lo / dmin[:, None]), 0, 63).astype(np.uint8)
    scale = d[:, None, None] * sc[:, :, None]
    q = np.clip(np.rint((x + (dmin[:, None] * m)[:, :, None]) / scale), 0, levels).astype(np.uint8)
    return d, dmin, sc, m, q


def _q4_k(x: np.ndarray) -> np.ndarray:
    d, dmin, sc, m, q = _affine(x, 15)
    chunks = q.reshape(-1, 4, 2, 32)  # sub-blocks 2c and 2c + 1 share chunk c's bytes
    qs = (chunks[:, :, 0] | (chunks[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([_halves(d), _halves(dmin), _pack_scales(sc, m), qs], axis=1)


def _q5_k(x: np.ndarray) -> np.ndarray:
    d, dmin, sc, m, q = _affine(x, 31)
    chunks = (q & 0x0F).reshape(-1, 4, 2, 32)
    qs = (chunks[:, :, 0] | (chunks[:, :, 1] << 4)).reshape(-1, 128)
    qh = np.zeros((q.shape[0], 32), np.uint8)
    for s in range(8):  # sub-block s puts its fifth bits in bit s
        qh |= ((q[:, s] >> 4) & 1) << s
    return np.concatenate([_halves(d), _halves(dmin), _pack_scales(sc, m), qh, qs], axis=1)


def _q6_k(x: np.ndarray) -> np.ndarray:
    sub = x.reshape(-1, 16, 16)
    # as llama.cpp does, the value of largest magnitude maps to -32, so the int8 scales take either
    # sign: a reader that takes them unsigned (a plain `char` on ARM) is then wrong
    step = -np.take_along_axis(sub, np.abs(sub).argmax(axis=2)[:, :, None], axis=2)[:, :, 0] / 32
    top = np.abs(step).max(axis=1)
    d = np.asarray(np.where(top > 0, top / 127, 1.0), np.float16).astype(np.float32)
    sc = np.rint(step / d[:, None])
    sc = np.where(sc == 0, np.where(step < 0, -1, 1), np.clip(sc, -127, 127)).astype(np.int8)
    scale = d[:, None, None] * sc[:, :, None]
    q = (np.clip(np.rint(sub / scale), -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # (half, r, i)
    low = np.concatenate([(q[:, :, 0] & 0x0F) | ((q[:, :, 2] & 0x0F) << 4),
                          (q[:, :, 1] & 0x0F) | ((q[:, :, 3] & 0x0F) << 4)], axis=2)
    qh = sum(((q[:, :, r] >> 4) & 3) << (2 * r) for r in range(4)).astype(np.uint8)
    return np.concatenate([low.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8), _halves(d)], axis=1)


def _pairs(q: np.ndarray) -> np.ndarray:
    """(n, 256) 2-bit quants -> (n, 64) bytes: value i + 32 r of half h in bits 2r of byte 32 h + i."""
    q = q.reshape(-1, 2, 4, 32)
    return sum((q[:, :, r] & 3) << (2 * r) for r in range(4)).astype(np.uint8).reshape(-1, 64)


def _q2_k(x: np.ndarray) -> np.ndarray:
    sub = x.reshape(-1, 16, 16)
    lo = np.minimum(sub.min(axis=2), 0.0)
    step = (sub.max(axis=2) - lo) / 3
    d = np.asarray(np.where(step.max(axis=1) > 0, step.max(axis=1) / 15, 1.0), np.float16).astype(np.float32)
    dmin = np.asarray(np.where(lo.min(axis=1) < 0, -lo.min(axis=1) / 15, 1.0), np.float16).astype(np.float32)
    sc = np.clip(np.rint(step / d[:, None]), 1, 15).astype(np.uint8)
    m = np.clip(np.rint(-lo / dmin[:, None]), 0, 15).astype(np.uint8)
    q = np.clip(np.rint((sub + (dmin[:, None] * m)[:, :, None]) / (d[:, None] * sc)[:, :, None]), 0, 3)
    return np.concatenate([sc | (m << 4), _pairs(q.astype(np.uint8).reshape(-1, 256)), _halves(d), _halves(dmin)],
                          axis=1)


def _q3_k(x: np.ndarray) -> np.ndarray:
    sub = x.reshape(-1, 16, 16)
    # as llama.cpp does, the value of largest magnitude maps to -4, so scales take either sign
    step = -np.take_along_axis(sub, np.abs(sub).argmax(axis=2)[:, :, None], axis=2)[:, :, 0] / 4
    top = np.abs(step).max(axis=1)
    d = np.asarray(np.where(top > 0, top / 31, 1.0), np.float16).astype(np.float32)
    sc = np.rint(step / d[:, None])
    sc = np.where(sc == 0, np.where(step < 0, -1, 1), np.clip(sc, -31, 31)).astype(np.int32)
    q = (np.clip(np.rint(sub / (d[:, None] * sc)[:, :, None]), -4, 3) + 4).astype(np.uint8).reshape(-1, 256)
    hmask = sum(((q[:, 32 * k:32 * k + 32] >> 2) & 1) << k for k in range(8)).astype(np.uint8)
    v = (sc + 32).astype(np.uint8)  # 6 bits: low nibbles in bytes 0-7 (scales 0-7) and their high nibbles
    packed = np.zeros((v.shape[0], 12), np.uint8)  # (scales 8-15); the top 2 bits in bytes 8-11
    packed[:, 0:8] = (v[:, 0:8] & 15) | ((v[:, 8:16] & 15) << 4)
    for s in range(16):
        packed[:, 8 + s % 4] |= (v[:, s] >> 4) << (2 * (s // 4))
    return np.concatenate([hmask, _pairs(q), packed, _halves(d)], axis=1)


ENCODERS = {"Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}


def encode(w: np.ndarray, kind: str) -> np.ndarray:
    """A 2-D float array whose rows are whole super-blocks -> its blocks as (rows, bytes) uint8,
    the form `gguf.GGUFWriter.add_tensor(..., raw_dtype=...)` takes."""
    rows, cols = w.shape
    if cols % 256:
        raise ValueError(f"{kind} needs rows of whole 256-value super-blocks, not {cols}")
    x = np.asarray(w, np.float32).reshape(-1, 8, 32) if kind in ("Q4_K", "Q5_K") else np.asarray(w, np.float32).reshape(-1, 256)
    return ENCODERS[kind](x).reshape(rows, -1)
