/*
 * colibri engine: a Llama-architecture transformer, readable top to bottom.
 * Sections: safetensors reading, weights, state, kernels, forward pass, public API,
 * sampling. The matmul kernels are in kernels.c, compiled once per instruction set and chosen
 * at load (kernels.h). See engine.h for the contract and the status codes.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise */
#include "engine.h"
#include "kernels.h"
#include "pool.h"
#include <stdatomic.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h> /* snprintf only: the library prints nothing */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ============================================================ safetensors
 * Layout: u64 little-endian header size N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [a, b], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {...}}
 * then the data section; offsets are relative to its start. A minimal JSON reader covers
 * exactly this shape and rejects anything malformed. */

typedef enum { DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K,
               DT_Q2_K, DT_Q3_K, DT_OTHER } dtype_t;

/* Values per block of a type (1 for the float types): a tensor's rows hold whole blocks. The
 * llama.cpp block types hold 32 values: Q8_0 a half scale and 32 int8; Q4_0 a half scale and
 * 32 nibbles; Q4_1 a half scale, a half minimum and 32 nibbles; Q5_0 and Q5_1 add 32 fifth
 * bits (4 bytes) before the nibbles. Its "K" types hold 256 values
 * in sub-blocks whose scales are themselves quantized (see unpack_block, to_f32). */
static size_t block_values(dtype_t t) {
    return t >= DT_Q4_K && t <= DT_Q3_K ? 256 : t >= DT_Q8_0 ? 32 : 1;
}

/* Bytes that `count` values of a type take; 0 for a type this engine cannot read or a count
 * that is not a whole number of its blocks. */
static size_t dtype_bytes(dtype_t t, size_t count) {
    static const size_t bytes[] = {[DT_F32] = 4, [DT_F16] = 2, [DT_BF16] = 2, [DT_Q8_0] = 34, [DT_Q4_0] = 18,
                                   [DT_Q4_1] = 20, [DT_Q5_0] = 22, [DT_Q5_1] = 24, [DT_Q4_K] = 144,
                                   [DT_Q5_K] = 176, [DT_Q6_K] = 210, [DT_Q2_K] = 84, [DT_Q3_K] = 110};
    const size_t per = block_values(t);
    return t == DT_OTHER || count % per ? 0 : count / per * bytes[t];
}

typedef struct {
    char name[160];
    dtype_t dtype;
    int ndim;
    long shape[4];
    size_t begin, end;
} tensor_info;

typedef struct {
    const char *p, *end;
} json_cur;

static void js_ws(json_cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int js_expect(json_cur *c, char ch) {
    js_ws(c);
    if (c->p >= c->end || *c->p != ch) return 0;
    c->p++;
    return 1;
}

/* Reads a string without escapes other than \" and \\ (tensor names need no more). */
static int js_string(json_cur *c, char *out, size_t cap) {
    js_ws(c);
    if (c->p >= c->end || *c->p != '"') return 0;
    c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != '"') {
        char ch = *c->p++;
        if (ch == '\\') {
            if (c->p >= c->end) return 0;
            ch = *c->p++;
            if (ch != '"' && ch != '\\' && ch != '/') return 0;
        }
        if (n + 1 >= cap) return 0;
        out[n++] = ch;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    out[n] = 0;
    return 1;
}

static int js_uint(json_cur *c, size_t *out) {
    js_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    size_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        size_t d = (size_t)(*c->p++ - '0');
        if (v > (SIZE_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* Skips any JSON value (used for __metadata__ and unknown keys). */
static int js_skip(json_cur *c, int depth) {
    js_ws(c);
    if (c->p >= c->end || depth > 32) return 0;
    char ch = *c->p;
    if (ch == '"') {
        char tmp[4096];
        return js_string(c, tmp, sizeof tmp);
    }
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->p++;
        js_ws(c);
        if (c->p < c->end && *c->p == close) { c->p++; return 1; }
        for (;;) {
            if (ch == '{') {
                char key[4096];
                if (!js_string(c, key, sizeof key) || !js_expect(c, ':')) return 0;
            }
            if (!js_skip(c, depth + 1)) return 0;
            js_ws(c);
            if (c->p < c->end && *c->p == ',') { c->p++; continue; }
            return js_expect(c, close);
        }
    }
    while (c->p < c->end && *c->p != ',' && *c->p != '}' && *c->p != ']') c->p++;
    return 1;
}

static int js_tensor(json_cur *c, tensor_info *t) {
    if (!js_expect(c, '{')) return 0;
    int seen = 0;
    for (;;) {
        char key[64];
        if (!js_string(c, key, sizeof key) || !js_expect(c, ':')) return 0;
        if (strcmp(key, "dtype") == 0) {
            char dt[16];
            if (!js_string(c, dt, sizeof dt)) return 0;
            t->dtype = strcmp(dt, "F32") == 0 ? DT_F32 : strcmp(dt, "F16") == 0 ? DT_F16
                     : strcmp(dt, "BF16") == 0 ? DT_BF16 : DT_OTHER;
            seen |= 1;
        } else if (strcmp(key, "shape") == 0) {
            if (!js_expect(c, '[')) return 0;
            t->ndim = 0;
            js_ws(c);
            if (c->p < c->end && *c->p == ']') c->p++;
            else for (;;) {
                size_t v;
                if (t->ndim >= 4 || !js_uint(c, &v)) return 0;
                t->shape[t->ndim++] = (long)v;
                if (js_expect(c, ',')) continue;
                if (!js_expect(c, ']')) return 0;
                break;
            }
            seen |= 2;
        } else if (strcmp(key, "data_offsets") == 0) {
            if (!js_expect(c, '[') || !js_uint(c, &t->begin) || !js_expect(c, ',') || !js_uint(c, &t->end)
                || !js_expect(c, ']')) return 0;
            seen |= 4;
        } else if (!js_skip(c, 1)) {
            return 0;
        }
        if (js_expect(c, ',')) continue;
        if (!js_expect(c, '}')) return 0;
        return seen == 7;
    }
}

/* Parses the header into a malloc'd tensor table. Returns a status. */
static int st_parse(const char *hdr, size_t n, tensor_info **out, int *count) {
    json_cur c = {hdr, hdr + n};
    int cap = 64, k = 0;
    tensor_info *ts = malloc(sizeof(tensor_info) * (size_t)cap);
    if (!ts) return COLIBRI_E_NOMEM;
    if (!js_expect(&c, '{')) goto bad;
    js_ws(&c);
    if (c.p < c.end && *c.p == '}') { c.p++; goto done; }
    for (;;) {
        char key[160];
        if (!js_string(&c, key, sizeof key) || !js_expect(&c, ':')) goto bad;
        if (strcmp(key, "__metadata__") == 0) {
            if (!js_skip(&c, 1)) goto bad;
        } else {
            if (k == cap) {
                cap *= 2;
                tensor_info *grown = realloc(ts, sizeof(tensor_info) * (size_t)cap);
                if (!grown) { free(ts); return COLIBRI_E_NOMEM; }
                ts = grown;
            }
            memset(&ts[k], 0, sizeof ts[k]);
            strcpy(ts[k].name, key);
            if (!js_tensor(&c, &ts[k])) goto bad;
            k++;
        }
        if (js_expect(&c, ',')) continue;
        if (!js_expect(&c, '}')) goto bad;
        break;
    }
done:
    *out = ts;
    *count = k;
    return COLIBRI_OK;
bad:
    free(ts);
    return COLIBRI_E_FORMAT;
}

/* ============================================================ GGUF
 * Layout (versions 2 and 3, little-endian): "GGUF", u32 version, u64 tensor count, u64
 * metadata count; metadata entries (string key, u32 value type, value); tensor infos
 * (string name, u32 n_dims, u64 dims fastest-varying first, u32 ggml type, u64 offset);
 * then, at the next multiple of general.alignment (32 unless set), the data section the
 * offsets point into. Strings are u64 length + bytes. The metadata is read by the caller
 * (model config, tokenizer, template); here it is walked only to find where the tensor
 * infos start and the alignment. Tensor names are mapped to the Hugging Face names the
 * binder looks for, and shapes turned into row-major (rows, columns) order. */

typedef struct {
    const unsigned char *p, *end;
} gguf_cur;

static int gg_u32(gguf_cur *c, uint32_t *v) {
    if (c->end - c->p < 4) return 0;
    memcpy(v, c->p, 4); c->p += 4;
    return 1;
}

static int gg_u64(gguf_cur *c, uint64_t *v) {
    if (c->end - c->p < 8) return 0;
    memcpy(v, c->p, 8); c->p += 8;
    return 1;
}

/* A string: points *s at its bytes (not terminated) and *n at its length. */
static int gg_str(gguf_cur *c, const char **s, uint64_t *n) {
    if (!gg_u64(c, n) || *n > (uint64_t)(c->end - c->p)) return 0;
    *s = (const char *)c->p;
    c->p += *n;
    return 1;
}

enum { GG_U8, GG_I8, GG_U16, GG_I16, GG_U32, GG_I32, GG_F32, GG_BOOL, GG_STRING, GG_ARRAY, GG_U64, GG_I64, GG_F64 };

static int gg_skip(gguf_cur *c, uint32_t type, int depth) {
    static const int fixed[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type > GG_F64 || depth > 3) return 0;
    if (type == GG_STRING) { const char *s; uint64_t n; return gg_str(c, &s, &n); }
    if (type != GG_ARRAY) {
        if (c->end - c->p < fixed[type]) return 0;
        c->p += fixed[type];
        return 1;
    }
    uint32_t et;
    uint64_t n;
    if (!gg_u32(c, &et) || !gg_u64(c, &n) || et > GG_F64) return 0;
    if (et != GG_STRING && et != GG_ARRAY) {
        if (n > (uint64_t)(c->end - c->p) / (uint64_t)fixed[et]) return 0;
        c->p += n * (uint64_t)fixed[et];
        return 1;
    }
    for (uint64_t i = 0; i < n; i++) if (!gg_skip(c, et, depth + 1)) return 0;
    return 1;
}

/* GGUF's llama tensor names -> the Hugging Face names; 0 if the name is not one of them
 * (such tensors are kept under their own name and never bound). */
static int gg_hf_name(const char *g, size_t n, char *out, size_t cap) {
    static const char *const top[][2] = {{"token_embd.weight", "model.embed_tokens.weight"},
                                         {"output_norm.weight", "model.norm.weight"},
                                         {"output.weight", "lm_head.weight"}};
    static const char *const blk[][2] = {
        {"attn_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_output.weight", "self_attn.o_proj.weight"},
        {"ffn_gate.weight", "mlp.gate_proj.weight"},    {"ffn_up.weight", "mlp.up_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"}};
    char name[160];
    if (n >= sizeof name) return 0;
    memcpy(name, g, n);
    name[n] = 0;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strcmp(name, top[i][0]) == 0) return snprintf(out, cap, "%s", top[i][1]) < (int)cap;
    unsigned layer;
    int used = 0;
    if (sscanf(name, "blk.%u.%n", &layer, &used) == 1 && used > 0)
        for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++)
            if (strcmp(name + used, blk[i][0]) == 0)
                return snprintf(out, cap, "model.layers.%u.%s", layer, blk[i][1]) < (int)cap;
    return 0;
}

static dtype_t gg_dtype(uint32_t ggml_type) {
    switch (ggml_type) {
    case 0: return DT_F32;
    case 1: return DT_F16;
    case 2: return DT_Q4_0;
    case 3: return DT_Q4_1;
    case 6: return DT_Q5_0;
    case 7: return DT_Q5_1;
    case 8: return DT_Q8_0;
    case 10: return DT_Q2_K;
    case 11: return DT_Q3_K;
    case 12: return DT_Q4_K;
    case 13: return DT_Q5_K;
    case 14: return DT_Q6_K;
    case 30: return DT_BF16;
    default: return DT_OTHER;
    }
}

/* Parses a mapped GGUF file into a malloc'd tensor table; *data_off receives where the data
 * section starts. Returns a status. */
static int gguf_parse(const void *map, size_t size, tensor_info **out, int *count, size_t *data_off) {
    gguf_cur c = {map, (const unsigned char *)map + size};
    uint32_t magic, version, alignment = 32;
    uint64_t n_tensors, n_kv;
    if (!gg_u32(&c, &magic) || memcmp(&magic, "GGUF", 4) || !gg_u32(&c, &version) || (version != 2 && version != 3)
        || !gg_u64(&c, &n_tensors) || !gg_u64(&c, &n_kv) || n_tensors > 1000000 || n_kv > 1000000)
        return COLIBRI_E_FORMAT;
    for (uint64_t i = 0; i < n_kv; i++) {
        const char *key;
        uint64_t klen;
        uint32_t type;
        if (!gg_str(&c, &key, &klen) || !gg_u32(&c, &type)) return COLIBRI_E_FORMAT;
        if (klen == 17 && memcmp(key, "general.alignment", 17) == 0) {
            if (type != GG_U32 || !gg_u32(&c, &alignment) || alignment == 0 || (alignment & (alignment - 1)))
                return COLIBRI_E_FORMAT;
        } else if (!gg_skip(&c, type, 0)) {
            return COLIBRI_E_FORMAT;
        }
    }
    tensor_info *ts = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof(tensor_info));
    if (!ts) return COLIBRI_E_NOMEM;
    for (uint64_t i = 0; i < n_tensors; i++) {
        tensor_info *t = &ts[i];
        const char *name;
        uint64_t nlen, offset, dims[4];
        uint32_t n_dims, type;
        if (!gg_str(&c, &name, &nlen) || !gg_u32(&c, &n_dims) || n_dims < 1 || n_dims > 4) goto bad;
        uint64_t elems = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            if (!gg_u64(&c, &dims[d]) || dims[d] == 0 || dims[d] > (1ull << 40) || elems > (1ull << 40) / dims[d]) goto bad;
            elems *= dims[d];
        }
        if (!gg_u32(&c, &type) || !gg_u64(&c, &offset) || offset % alignment) goto bad;
        if (!gg_hf_name(name, (size_t)nlen, t->name, sizeof t->name)) {
            if (nlen >= sizeof t->name) goto bad;
            memcpy(t->name, name, (size_t)nlen);
            t->name[nlen] = 0;
        }
        t->dtype = gg_dtype(type);
        t->ndim = (int)n_dims;
        for (uint32_t d = 0; d < n_dims; d++) t->shape[d] = (long)dims[n_dims - 1 - d];  /* rows first */
        size_t bytes = dtype_bytes(t->dtype, (size_t)elems);
        if (t->dtype != DT_OTHER && (!bytes || dims[0] % block_values(t->dtype))) goto bad;  /* blocks run along rows */
        t->begin = (size_t)offset;
        t->end = t->begin + bytes;  /* a type this engine cannot read keeps end == begin: bind refuses it */
        if (t->end < t->begin) goto bad;
    }
    size_t pos = (size_t)(c.p - (const unsigned char *)map);
    size_t start = (pos + alignment - 1) / alignment * alignment;
    if (start > size) goto bad;
    for (uint64_t i = 0; i < n_tensors; i++)
        if (ts[i].end > size - start) goto bad;
    *out = ts;
    *count = (int)n_tensors;
    *data_off = start;
    return COLIBRI_OK;
bad:
    free(ts);
    return COLIBRI_E_FORMAT;
}

/* ============================================================ value conversion */

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) bits = sign;
        else { /* subnormal: normalise */
            int e = -1;
            do { e++; mant <<= 1; } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | (mant << 13);
    else bits = sign | ((exp + 112) << 23) | (mant << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float half_at(const char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return half_to_float(h);
}

/* Block b (32 values) of a tensor of a 32-value block type or of Q4_K / Q5_K, in one form:
 * value j = scale * q[j] + min with q unsigned. Every such type says exactly this (Q8_0: the
 * int8 + 128 and min = -128 scale; Q4_0: min = -8 scale; Q5_0: -16 scale), so the kernel and
 * the expansion to F32 share one reading of the file. In the 32-value types byte j of the
 * nibbles holds value j low and value j + 16 high, and Q5_0/Q5_1's fifth bit of value j is
 * bit j of their 32-bit little-endian plane.
 *
 * Q4_K and Q5_K: a 256-value super-block is 8 sub-blocks of 32, sub-block s holding
 * value = (d * sc_s) * q - dmin * m_s with d, dmin halves and sc_s, m_s 6-bit integers packed
 * in 12 bytes (s < 4: the low 6 bits of bytes s and s + 4; s >= 4: a nibble of byte s + 4 and
 * the top 2 bits of bytes s - 4 and s). The products are exact in float (11 + 6 bits), so the
 * (scale, min) form loses nothing. The quants run in 64-value chunks: byte i of chunk c holds
 * value i of sub-block 2c in its low nibble and of sub-block 2c + 1 in its high one; Q5_K adds
 * a fifth bit per value, bit 2c (or 2c + 1) of byte i of a 32-byte plane. */
static void unpack_block(dtype_t t, const char *src, size_t b, unsigned char q[32], float *scale, float *min) {
    if (block_values(t) == 32) {
        const char *blk = src + dtype_bytes(t, 32) * b;
        const float d = half_at(blk);
        *scale = d;
        if (t == DT_Q8_0) {
            for (int j = 0; j < 32; j++) q[j] = (unsigned char)((int)(int8_t)blk[2 + j] + 128);
            *min = -128.0f * d;
            return;
        }
        const int has_min = t == DT_Q4_1 || t == DT_Q5_1, five = t == DT_Q5_0 || t == DT_Q5_1;
        const unsigned char *qh = (const unsigned char *)blk + (has_min ? 4 : 2), *qs = qh + (five ? 4 : 0);
        const uint32_t high = five ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24 : 0;
        for (int j = 0; j < 16; j++) {
            q[j] = (unsigned char)((qs[j] & 0x0f) | ((high >> j) & 1) << 4);
            q[j + 16] = (unsigned char)((qs[j] >> 4) | ((high >> (j + 16)) & 1) << 4);
        }
        *min = has_min ? half_at(blk + 2) : (five ? -16.0f : -8.0f) * d;
        return;
    }
    const unsigned char *sb = (const unsigned char *)src + dtype_bytes(t, 256) * (b / 8);
    const unsigned char *k = sb + 4;  /* the 12 bytes of packed sub-block scales and mins */
    const int s = (int)(b % 8);
    int sc, m;
    if (s < 4) {
        sc = k[s] & 63;
        m = k[s + 4] & 63;
    } else {
        sc = (k[s + 4] & 0x0f) | ((k[s - 4] >> 6) << 4);
        m = (k[s + 4] >> 4) | ((k[s] >> 6) << 4);
    }
    *scale = half_at((const char *)sb) * (float)sc;
    *min = -(half_at((const char *)sb + 2) * (float)m);
    const int c = s / 2, shift = s % 2 ? 4 : 0;
    const unsigned char *qs = sb + 16 + (t == DT_Q5_K ? 32 : 0) + 32 * c, *qh = sb + 16;
    for (int i = 0; i < 32; i++) {
        q[i] = (qs[i] >> shift) & 0x0f;
        if (t == DT_Q5_K) q[i] |= ((qh[i] >> s) & 1) << 4;
    }
}

/* Q6_K: a 256-value super-block is 16 sub-blocks of 16, value = d * sc_s * (q - 32) with d a
 * half and sc_s an int8, q 6 bits: low nibbles in 128 bytes, high pairs in 64, the int8 scales
 * in 16, d last. Each 128-value half h takes 64 low bytes, 32 high bytes and 8 scales; in it
 * value i + 32 r (r = 0..3, i = 0..31) has the low nibble of low byte i + 32 (r % 2) (high
 * nibble when r >= 2), bits 2r, 2r+1 of high byte i, and scale (i + 32 r) / 16.
 * q6_block gives 32-value block k (0..7) of a super-block: its quants (unsigned) and the
 * scale d * sc_s of each 16-value half (exact in float: 11 + 8 bits). */
static void q6_block(const unsigned char *sb, int k, unsigned char q[32], float ds[2]) {
    const int h = k / 4, r = k % 4;
    const unsigned char *lo = sb + 64 * h + 32 * (r % 2), *hi = sb + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(sb + 192 + 8 * h);
    for (int i = 0; i < 32; i++) q[i] = (unsigned char)(((lo[i] >> (r >= 2 ? 4 : 0)) & 0x0f) | ((hi[i] >> (2 * r)) & 3) << 4);
    const float d = half_at((const char *)sb + 208);
    ds[0] = d * (float)sc[2 * r];
    ds[1] = d * (float)sc[2 * r + 1];
}

static void q6_k_to_f32(const char *src, size_t count, float *dst) {
    unsigned char q[32];
    float ds[2];
    for (size_t b = 0; b < count / 32; b++, dst += 32) {
        q6_block((const unsigned char *)src + b / 8 * 210, (int)(b % 8), q, ds);
        for (int j = 0; j < 32; j++) dst[j] = ds[j / 16] * (float)((int)q[j] - 32);  /* as llama.cpp rounds it */
    }
}

/* Q2_K and Q3_K: 16 sub-blocks of 16 too, their 2-bit quants in 64 bytes as in Q6_K's high
 * pairs: value i + 32 r of 128-value half h is bits 2r, 2r+1 of byte 32 h + i, and sub-block s
 * covers values 16 s .. 16 s + 15.
 * Q2_K (84 bytes: 16 scale bytes, the quants, d, dmin): value = d * (sc_s & 15) * q - dmin *
 * (sc_s >> 4).
 * Q3_K (110 bytes: a 32-byte plane of third bits, the quants, 12 bytes of 6-bit scales, d):
 * value = d * (sc_s - 32) * (q - 4), the third bit of value i + 32 k (k = 0..7) being bit k of
 * plane byte i; scale s is the low (s < 8) or high nibble of byte s % 8 below the 2 bits
 * 2 (s / 4) of byte 8 + s % 4.
 * Every product is exact in float (11 + 6 bits), so W_Q16's (scale, min) per half is exact
 * and its values equal llama.cpp's. */
static void low_k_block(dtype_t t, const unsigned char *sb, int k, unsigned char q[32], float scale[2], float min[2]) {
    const int h = k / 4, r = k % 4;
    const unsigned char *qs = sb + (t == DT_Q2_K ? 16 : 32) + 32 * h;
    for (int i = 0; i < 32; i++) q[i] = (qs[i] >> (2 * r)) & 3;
    if (t == DT_Q2_K) {
        const float d = half_at((const char *)sb + 80), dmin = half_at((const char *)sb + 82);
        for (int j = 0; j < 2; j++) {
            scale[j] = d * (float)(sb[2 * k + j] & 15);
            min[j] = -(dmin * (float)(sb[2 * k + j] >> 4));
        }
        return;
    }
    const unsigned char *sc = sb + 96;
    const float d = half_at((const char *)sb + 108);
    for (int i = 0; i < 32; i++) q[i] |= ((sb[i] >> k) & 1) << 2;
    for (int j = 0; j < 2; j++) {
        const int s = 2 * k + j, low = s < 8 ? sc[s % 8] & 15 : sc[s % 8] >> 4, high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        scale[j] = d * (float)((low | high << 4) - 32);
        min[j] = -4.0f * scale[j];
    }
}

/* A type whose scales change every 16 values: it is kept as W_Q16 (see `matrix`). */
static int per_half(dtype_t t) { return t == DT_Q6_K || t == DT_Q2_K || t == DT_Q3_K; }

/* Block b in W_Q16's form: a scale and min per 16-value half. Q6_K's are d * sc_s and
 * -32 d * sc_s (exact); Q2_K's and Q3_K's see low_k_block; a (scale, min) block type's are
 * its own, twice. */
static void unpack_halves(dtype_t t, const char *src, size_t b, unsigned char q[32], float scale[2], float min[2]) {
    if (t == DT_Q6_K) {
        q6_block((const unsigned char *)src + b / 8 * 210, (int)(b % 8), q, scale);
        min[0] = -32.0f * scale[0];
        min[1] = -32.0f * scale[1];
        return;
    }
    if (t == DT_Q2_K || t == DT_Q3_K) {
        low_k_block(t, (const unsigned char *)src + dtype_bytes(t, 256) * (b / 8), (int)(b % 8), q, scale, min);
        return;
    }
    unpack_block(t, src, b, q, &scale[0], &min[0]);
    scale[1] = scale[0];
    min[1] = min[0];
}

/* `count` values of any readable type to F32 (count a whole number of the type's blocks). */
static void to_f32(dtype_t t, const char *src, size_t count, float *dst) {
    if (t == DT_F32) { memcpy(dst, src, count * sizeof(float)); return; }
    if (t == DT_F16 || t == DT_BF16) {
        for (size_t i = 0; i < count; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            if (t == DT_F16) dst[i] = half_to_float(h);
            else { uint32_t b = (uint32_t)h << 16; memcpy(&dst[i], &b, 4); }
        }
        return;
    }
    if (t == DT_Q6_K) { q6_k_to_f32(src, count, dst); return; }
    unsigned char q[32];
    float scale, min;
    if (per_half(t)) {  /* Q2_K, Q3_K: scale * q + min is llama.cpp's value exactly (low_k_block) */
        float sc[2], mn[2];
        for (size_t b = 0; b < count / 32; b++, dst += 32) {
            unpack_halves(t, src, b, q, sc, mn);
            for (int j = 0; j < 32; j++) dst[j] = sc[j / 16] * (float)q[j] + mn[j / 16];
        }
        return;
    }
    for (size_t b = 0; b < count / 32; b++, dst += 32) {
        unpack_block(t, src, b, q, &scale, &min);
        for (int j = 0; j < 32; j++) dst[j] = scale * (float)q[j] + min;
    }
}

/* ============================================================ weights and state */


/* The token embedding as the file stores it (any readable type): rows are converted to F32
 * one at a time as tokens use them, so a quantized table stays quantized. */
typedef struct {
    dtype_t dtype;
    const char *rows;   /* (vocab, dim) in the file mapping, or an F32 copy */
    size_t row_bytes;
} table;

typedef struct {
    table token_embedding;   /* (vocab, dim) */
    float **attn_norm;       /* per layer (dim) */
    matrix *wqkv;            /* per layer (q_dim + 2*kv_dim, dim): q_proj, k_proj, v_proj stacked */
    matrix *wo;              /* per layer (dim, n_heads*head_size) */
    float **ffn_norm;        /* per layer (dim) */
    matrix *w_gate_up;       /* per layer (2*hidden_dim, dim): gate_proj, up_proj stacked */
    matrix *w_down;          /* per layer (dim, hidden_dim) */
    float *final_norm;       /* (dim) */
    matrix lm_head;          /* (vocab, dim); the embedding's values when tied */
} weights;

typedef struct {
    float *key_cache;   /* (n_layers, n_ctx, kv_dim) */
    float *value_cache; /* (n_layers, n_ctx, kv_dim) */
    int *tokens;        /* (n_ctx) the history these caches hold */
    int len;
} slot_state;

/* Scratch for one forward pass over `rows` token positions. */
typedef struct {
    int cap;         /* rows allocated */
    float *x;        /* (cap, dim) residual stream */
    float *xb;       /* (cap, dim) normed input */
    float *qkv;      /* (cap, q_dim + 2*kv_dim): each row's query, key, value */
    float *att_out;  /* (cap, n_heads*head_size) */
    float *hb;       /* (cap, hidden_dim) */
    float *gu;       /* (cap, 2*hidden_dim): each row's gate then up projection */
    float *att;      /* (cap, n_heads, n_ctx) attention scores */
    int8_t *aq;      /* (cap, max_in): a block kernel's input rows quantized (see quantize_rows) */
    float *ah;       /* (cap, max_in/16): each input half block's scale * the sum of its quants (W_Q16) */
    float *ad;       /* (cap rounded up to 4, max_in/32): each input block's scale, rows in fours: (r/4, block, r%4) */
    float *as;       /* (cap, max_in/32): each input block's scale * the sum of its quants */
    float *ai;       /* as, laid out as ad: (cap rounded up to 4, max_in/32), (r/4, block, r%4) */
    uint16_t *ab;    /* (cap, max_in rounded up to even): a pair kernel's input rows as bfloat16 (W_BF16P) */
} scratch;

struct colibri_engine {
    colibri_config cfg;
    int head_size, kv_dim, q_dim;
    int max_in;            /* the widest matmul input: max(dim, q_dim, hidden_dim) */
    int rope_interleaved;  /* 1: RoPE rotates pairs (2i, 2i+1) (GGUF); 0: (i, i + head_size/2) */
    int n_slots, n_threads;
    weights w;
    slot_state slots[COLIBRI_MAX_SLOTS];
    scratch s;
    int kernel_path;             /* COLIBRI_KERNELS_*: the instruction set the matmuls use */
    const kernel_set *kernels;   /* its functions */
    float *rope_cos, *rope_sin;  /* (n_ctx, head_size/2) */
    void *map;                   /* the mmapped file */
    size_t map_size;
    float **owned;               /* converted (F16/BF16) tensors we must free */
    int n_owned;
    pool *pool;                  /* the team that runs the parallel loops (pool.h); NULL with one thread */
};

static void *xcalloc(size_t n, size_t size) { return n && size ? calloc(n, size) : NULL; }

static void free_scratch(scratch *s) {
    free(s->x); free(s->xb); free(s->qkv);
    free(s->att_out); free(s->hb); free(s->gu); free(s->att);
    free(s->aq); free(s->ad); free(s->as); free(s->ai); free(s->ah); free(s->ab);
    memset(s, 0, sizeof *s);
}

static int ensure_scratch(colibri_engine *e, int rows) {
    if (rows <= e->s.cap) return COLIBRI_OK;
    free_scratch(&e->s);
    const colibri_config *c = &e->cfg;
    scratch *s = &e->s;
    size_t r = (size_t)rows;
    s->x = xcalloc(r * c->dim, sizeof(float));
    s->xb = xcalloc(r * c->dim, sizeof(float));
    s->qkv = xcalloc(r * (e->q_dim + 2 * e->kv_dim), sizeof(float));
    s->att_out = xcalloc(r * e->q_dim, sizeof(float));
    s->hb = xcalloc(r * c->hidden_dim, sizeof(float));
    s->gu = xcalloc(r * 2 * c->hidden_dim, sizeof(float));
    s->att = xcalloc(r * c->n_heads * c->n_ctx, sizeof(float));
    s->aq = xcalloc(r * e->max_in, 1);
    s->ad = xcalloc((r + 3) / 4 * 4 * e->max_in / 32, sizeof(float));
    s->as = xcalloc(r * e->max_in / 32 + 1, sizeof(float));
    s->ai = xcalloc((r + 3) / 4 * 4 * e->max_in / 32, sizeof(float));
    s->ah = xcalloc(r * e->max_in / 16 + 1, sizeof(float));
    s->ab = xcalloc(r * (size_t)(e->max_in + 1), sizeof(uint16_t));
    if (!s->x || !s->xb || !s->qkv || !s->att_out || !s->hb || !s->gu || !s->att || !s->aq || !s->ad || !s->as ||
        !s->ai || !s->ah || !s->ab) {
        free_scratch(s);
        return COLIBRI_E_NOMEM;
    }
    s->cap = rows;
    return COLIBRI_OK;
}

/* ============================================================ kernels */

static void rmsnorm(float *out, const float *x, const float *weight, int n, float eps) {
    double ss = 0.0;  /* double partial sums (vectorised): exact enough for any width */
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) out[i] = weight[i] * (scale * x[i]);
}

/* The engine's float vector (attention, softmax, SwiGLU): the CPU's register width, as the build
 * targets it (-march, setup.py), so that a head of NV vectors and the sixteen-lane score folds
 * stay in registers: with AVX-512 16 floats, with AVX2 8 (a 16-float vector there is two
 * registers, and the folds and the 16 score accumulators went through the stack: attention was a
 * third of an AVX2 build's prefill, issue 52), else 4 (SSE, NEON). */
#if defined(__AVX512F__)
#define AW 16
#elif defined(__AVX__)
#define AW 8
#else
#define AW 4
#endif
typedef float avec __attribute__((vector_size(AW * sizeof(float))));

static inline avec loadv(const float *p) { avec v; memcpy(&v, p, sizeof v); return v; }

/* The sum of v's lanes: the halves added, then the half's lanes in pairs (one fixed order). */
static float hsum_vec(avec v) {
    float t[AW];
    memcpy(t, &v, sizeof t);
    for (int i = 0; i < AW / 2; i++) t[i] += t[i + AW / 2];
#if AW == 16
    return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
#elif AW == 8
    return (t[0] + t[2]) + (t[1] + t[3]);
#else
    return t[0] + t[1];
#endif
}

/* exp(x) on AW lanes for the softmax and SiLU loops: Cephes-style reduction x = n ln2 + r and a
 * degree-6 polynomial in r (relative error below 2e-7, i.e. a couple of float ulps); libm's expf
 * is one call per element. Inputs are clamped to the range where 2^n is a normal float, which
 * only matters for results that are 0 or overflow anyway in a softmax or a sigmoid; NaN stays
 * NaN. The clamp is a bitwise select: written as ternaries on floats, GCC kept them as branches
 * (so the loops stayed scalar), or, told FP compares cannot trap, if-converted them by dividing
 * by exp's value at each bound, denormal quotients whose microcode assists made SwiGLU 2.7x
 * slower than scalar (measured). */
typedef int32_t ivec __attribute__((vector_size(AW * sizeof(int32_t))));

static inline avec select_v(ivec mask, avec a, avec b) { return (avec)(((ivec)a & mask) | ((ivec)b & ~mask)); }

static inline avec exp_vec(avec x) {
    const avec zero = {0};
    x = select_v(x < -87.0f, zero - 87.0f, x);
    x = select_v(x > 88.0f, zero + 88.0f, x);
    const float magic = 12582912.0f;  /* 1.5 * 2^23: adding it rounds to an integer */
    const avec t = x * 1.44269504088896341f + magic, n = t - magic;
    const avec r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  /* ln 2 in two parts */
    avec p = zero + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const ivec bits = ((ivec)t - 0x4B400000 + 127) << 23;  /* t's low mantissa bits hold n: 2^n */
    return p * (avec)bits;
}

/* exp_vec for one value (the loops' tails). */
static inline float exp1(float x) { return exp_vec((avec){0} + x)[0]; }

static void softmax(float *x, int n) {
    float max = x[0];
#pragma omp simd reduction(max : max)
    for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    avec acc = {0};
    int i = 0;
    for (; i + AW <= n; i += AW) {
        const avec e = exp_vec(loadv(x + i) - max);
        memcpy(x + i, &e, sizeof e);
        acc += e;
    }
    float sum = hsum_vec(acc);
    for (; i < n; i++) sum += x[i] = exp1(x[i] - max);
    const float inv = 1.0f / sum;
    for (i = 0; i < n; i++) x[i] *= inv;
}

/* h = SiLU(gate) * up over n values (SwiGLU's hidden layer). */
static void swiglu(float *h, const float *gate, const float *up, int n) {
    int i = 0;
    for (; i + AW <= n; i += AW) {
        const avec g = loadv(gate + i), v = g / (1.0f + exp_vec(-g)) * loadv(up + i);
        memcpy(h + i, &v, sizeof v);
    }
    for (; i < n; i++) h[i] = gate[i] / (1.0f + exp1(-gate[i])) * up[i];
}


/* out (rows, d) = x (rows, n) @ W^T, whatever form W is kept in. */
static void matmul(colibri_engine *e, float *out, const float *x, const matrix *w, int rows) {
    const qinput q = {e->s.aq, e->s.ad, e->s.as, e->s.ai, e->s.ah, e->s.ab};
    if (w->kind == W_Q32 || w->kind == W_Q16) e->kernels->block_matmul(out, x, w, rows, e->pool, &q);
    else e->kernels->panel_matmul(out, x, w, rows, e->pool, &q);
}

/* ---- kernel paths (kernels.h): each compiled for its instruction set, chosen at load ---- */

static const kernel_set KERNEL_SETS[] = {
    [COLIBRI_KERNELS_PORTABLE] = {"portable", panel_matmul_portable, block_matmul_portable},
#if defined(__x86_64__) || defined(__i386__)
    [COLIBRI_KERNELS_AVX2] = {"avx2", panel_matmul_avx2, block_matmul_avx2},
    [COLIBRI_KERNELS_AVXVNNI] = {"avxvnni", panel_matmul_avxvnni, block_matmul_avxvnni},
    [COLIBRI_KERNELS_AVX512VNNI] = {"avx512vnni", panel_matmul_avx512vnni, block_matmul_avx512vnni},
    [COLIBRI_KERNELS_AVX512BF16] = {"avx512bf16", panel_matmul_avx512bf16, block_matmul_avx512bf16},
#endif
};

/* Whether this CPU runs kernel path `path` (what the OS enables, as __builtin_cpu_supports reads
 * it). The paths are not nested: AMD's Zen 4 has AVX-512 VNNI but not AVX-VNNI (its VEX form). */
int colibri_kernels_runs(int path) {
    if (path == COLIBRI_KERNELS_PORTABLE) return 1;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                       && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
                       && __builtin_cpu_supports("avx512vnni");
    switch (path) {
    case COLIBRI_KERNELS_AVX2: return avx2;
    case COLIBRI_KERNELS_AVXVNNI: return avx2 && __builtin_cpu_supports("avxvnni");
    case COLIBRI_KERNELS_AVX512VNNI: return avx512;
    case COLIBRI_KERNELS_AVX512BF16:  /* and a build whose compiler made its pair kernel */
        return avx512 && __builtin_cpu_supports("avx512bf16") && kernel_bf16_pairs_avx512bf16;
    }
#endif
    return 0;
}

/* Whether the BF16 pairs are this CPU's default where it runs them: on AMD, where they were measured
 * faster than widening (Zen 4: 2.0-2.5x the float tile from one row to 512, bench/kernels/bf16_dot.c;
 * Zen 5 and later, which run 512-bit operations whole, were not measured and are taken to gain at
 * least as much), not on Intel, where the Xeon measured (family 6 model 207) ran them 0.67-0.85x the
 * widening tile from four rows; COLIBRI_ISA=avx512bf16 still gives them there. */
static int pairs_by_default(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_is("amd");
#else
    return 0;
#endif
}

/* The widest path this CPU runs that is not wider than `cap`; COLIBRI_KERNELS_BEST (no cap): the
 * widest, but avx512bf16 only where pairs_by_default. */
static int cpu_kernel_path(int cap) {
    int path = cap != COLIBRI_KERNELS_BEST ? cap
               : pairs_by_default() ? COLIBRI_KERNELS_AVX512BF16 : COLIBRI_KERNELS_AVX512VNNI;
    while (path > COLIBRI_KERNELS_PORTABLE && !colibri_kernels_runs(path)) path--;
    return path;
}

int colibri_kernels_available(void) { return cpu_kernel_path(COLIBRI_KERNELS_BEST); }

#ifndef COLIBRI_MARCH
#define COLIBRI_MARCH "unknown"  /* built without setup.py */
#endif
const char *colibri_build_march(void) { return COLIBRI_MARCH; }

const char *colibri_kernels_name(int path) {
    if (path < COLIBRI_KERNELS_PORTABLE || path >= (int)(sizeof KERNEL_SETS / sizeof KERNEL_SETS[0])) return NULL;
    return KERNEL_SETS[path].name;
}

/* RoPE: rotate-half pairs i with i + head_size/2 (the Hugging Face convention); interleaved
 * pairs 2i with 2i + 1 (GGUF's llama layout). */
static void rope(float *vec, int n_heads, int head_size, int interleaved, const float *cos_row,
                 const float *sin_row) {
    int half = head_size / 2, step = interleaved ? 2 : 1, other = interleaved ? 1 : half;
    for (int h = 0; h < n_heads; h++) {
        float *v = vec + h * head_size;
        for (int i = 0; i < half; i++) {
            float *a = v + i * step, *b = a + other;  /* the pair frequency i rotates */
            float x1 = *a, x2 = *b;
            *a = x1 * cos_row[i] - x2 * sin_row[i];
            *b = x2 * cos_row[i] + x1 * sin_row[i];
        }
    }
}

/* Lane selections for hsum_block (indices AW..2AW-1 name the second vector's lanes): LOk/HIk take
 * the low/high k lanes of each 2k-lane group of both vectors, so adding them folds the pair into
 * one vector at half the width of the round before. */
#if AW == 16
#define LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define BITREV 0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15
#elif AW == 8
#define LO4 0, 1, 2, 3, 8, 9, 10, 11
#define HI4 4, 5, 6, 7, 12, 13, 14, 15
#define LO2 0, 1, 8, 9, 4, 5, 12, 13
#define HI2 2, 3, 10, 11, 6, 7, 14, 15
#define LO1 0, 8, 2, 10, 4, 12, 6, 14
#define HI1 1, 9, 3, 11, 5, 13, 7, 15
#define BITREV 0, 4, 2, 6, 1, 5, 3, 7
#else
#define LO2 0, 1, 4, 5
#define HI2 2, 3, 6, 7
#define LO1 0, 4, 2, 6
#define HI1 1, 5, 3, 7
#define BITREV 0, 2, 1, 3
#endif
/* Two-vector lane selection: __builtin_shufflevector in Clang and GCC 12+, GCC's older
 * __builtin_shuffle with a mask vector before that. */
#if defined(__clang__) || (__GNUC__ >= 12 && !defined(COLIBRI_OLD_GCC_SHUFFLE))
#define SHUFFLE(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#else
#define SHUFFLE(x, y, ...) __builtin_shuffle(x, y, (ivec){__VA_ARGS__})  /* ivec: beside exp_vec */
#endif
#define FOLD(x, y, LO, HI) (SHUFFLE(x, y, LO) + SHUFFLE(x, y, HI))

/* r[t] = the sum of a[t]'s lanes, for AW vectors at once: log2(AW) rounds each fold every pair of
 * vectors into one (AW - 1 adds in all, against AW separate horizontal sums whose every step is a
 * dependent shuffle). The folds leave t in bit-reversed lane order; one permutation restores it. */
static inline __attribute__((always_inline)) avec hsum_block(const avec *a) {
    avec d[2];
#if AW == 16
    avec b[8], c[4];
    for (int k = 0; k < 8; k++) b[k] = FOLD(a[2 * k], a[2 * k + 1], LO8, HI8);
    for (int k = 0; k < 4; k++) c[k] = FOLD(b[2 * k], b[2 * k + 1], LO4, HI4);
    for (int k = 0; k < 2; k++) d[k] = FOLD(c[2 * k], c[2 * k + 1], LO2, HI2);
#elif AW == 8
    avec c[4];
    for (int k = 0; k < 4; k++) c[k] = FOLD(a[2 * k], a[2 * k + 1], LO4, HI4);
    for (int k = 0; k < 2; k++) d[k] = FOLD(c[2 * k], c[2 * k + 1], LO2, HI2);
#else
    for (int k = 0; k < 2; k++) d[k] = FOLD(a[2 * k], a[2 * k + 1], LO2, HI2);
#endif
    avec e = FOLD(d[0], d[1], LO1, HI1);
    return SHUFFLE(e, e, BITREV);
}
#undef LO8
#undef HI8
#undef LO4
#undef HI4
#undef LO2
#undef HI2
#undef LO1
#undef HI1
#undef BITREV
#undef FOLD
#undef SHUFFLE

/* Attention for a head of NV whole vectors (NV a literal at each call site, so the loops
 * over it unroll). See attend. */
static inline __attribute__((always_inline)) void scores_vec(float *att, const avec *qv, const float *k, int kv_stride,
                                                           int n_t, float scale, int NV) {
    avec a[AW];
    int t = 0;
    for (; t + AW <= n_t; t += AW) {  /* scores AW positions at a time */
        for (int i = 0; i < AW; i++) {
            const float *kt = k + (size_t)(t + i) * kv_stride;
            a[i] = qv[0] * loadv(kt);
            for (int c = 1; c < NV; c++) a[i] += qv[c] * loadv(kt + c * AW);
        }
        avec sc = hsum_block(a) * scale;
        memcpy(att + t, &sc, sizeof sc);
    }
    for (; t < n_t; t++) {
        const float *kt = k + (size_t)t * kv_stride;
        avec acc = qv[0] * loadv(kt);
        for (int c = 1; c < NV; c++) acc += qv[c] * loadv(kt + c * AW);
        att[t] = hsum_vec(acc) * scale;
    }
}

/* One (row, query head) of a block that attend_block scores together: its query and output,
 * its scores, the length of its first span (from the block's shared K/V base) and its second
 * span (n2 may be 0). */
typedef struct { float *out; const float *q; float *att; int n1; const float *k2, *v2; int n2; } att_job;

/* Positions per K/V chunk in attend_block: 64 positions of a 128-float head are 32 KB of K,
 * so a chunk stays in L1 while every job of the block reads it. */
#define ATT_CHUNK 64
/* Rows per attention block in forward. */
#define ATT_ROWS 8

/* Attention on whole vectors (NV a literal at each call site, so the loops over it unroll)
 * for jobs that share their first m16 positions (a multiple of 16): those positions' K and
 * V are read chunk by chunk, each chunk once for the whole block instead of once per job from
 * L2, the cost that dominates attention over a long shared history. Each job's scores, softmax
 * and weighted sum of V are one sequence of operations whatever the block, so a row's output
 * is bit-identical alone (a decode step) or in a block (a prefill). */
static inline __attribute__((always_inline)) void attend_block_vec(const att_job *jobs, int nj, int m16,
                                                                 const float *k, const float *v, int kv_stride,
                                                                 float scale, int NV) {
    avec qv[128 / AW], o[128 / AW];  /* a head of up to 128 floats */
    for (int t0 = 0; t0 < m16; t0 += ATT_CHUNK) {
        int tn = m16 - t0 < ATT_CHUNK ? m16 - t0 : ATT_CHUNK;
        for (int j = 0; j < nj; j++) {
            for (int c = 0; c < NV; c++) qv[c] = loadv(jobs[j].q + c * AW);
            scores_vec(jobs[j].att + t0, qv, k + (size_t)t0 * kv_stride, kv_stride, tn, scale, NV);
        }
    }
    for (int j = 0; j < nj; j++) {
        const att_job *jb = &jobs[j];
        for (int c = 0; c < NV; c++) qv[c] = loadv(jb->q + c * AW);
        scores_vec(jb->att + m16, qv, k + (size_t)m16 * kv_stride, kv_stride, jb->n1 - m16, scale, NV);
        if (jb->n2) scores_vec(jb->att + jb->n1, qv, jb->k2, kv_stride, jb->n2, scale, NV);
        softmax(jb->att, jb->n1 + jb->n2);
        for (int c = 0; c < NV; c++) memcpy(jb->out + c * AW, &(avec){0}, sizeof(avec));
    }
    for (int t0 = 0; t0 < m16; t0 += ATT_CHUNK) {
        int tn = m16 - t0 < ATT_CHUNK ? m16 - t0 : ATT_CHUNK;
        for (int j = 0; j < nj; j++) {
            const float *att = jobs[j].att;
            for (int c = 0; c < NV; c++) o[c] = loadv(jobs[j].out + c * AW);
            for (int t = t0; t < t0 + tn; t++) {
                const float *vt = v + (size_t)t * kv_stride;
                for (int c = 0; c < NV; c++) o[c] += att[t] * loadv(vt + c * AW);
            }
            for (int c = 0; c < NV; c++) memcpy(jobs[j].out + c * AW, &o[c], sizeof o[c]);
        }
    }
    for (int j = 0; j < nj; j++) {
        const att_job *jb = &jobs[j];
        for (int c = 0; c < NV; c++) o[c] = loadv(jb->out + c * AW);
        for (int t = m16; t < jb->n1; t++) {
            const float *vt = v + (size_t)t * kv_stride;
            for (int c = 0; c < NV; c++) o[c] += jb->att[t] * loadv(vt + c * AW);
        }
        for (int t = 0; t < jb->n2; t++) {
            const float *vt = jb->v2 + (size_t)t * kv_stride;
            for (int c = 0; c < NV; c++) o[c] += jb->att[jb->n1 + t] * loadv(vt + c * AW);
        }
        for (int c = 0; c < NV; c++) memcpy(jb->out + c * AW, &o[c], sizeof o[c]);
    }
}

/* One head of causal attention over n_t cached positions, then n2 more from a second span
 * (k2, v2; n2 may be 0): out (hs) = softmax(q.K^T / sqrt(hs)) V over both, as if the two
 * spans were one run of positions. K and V rows are kv_stride apart; `att` is scratch for
 * n_t + n2 scores. The plain loops, for head sizes attend_block has no vector path for. */
static void attend(float *out, const float *q, const float *k, const float *v, int kv_stride, int hs, int n_t,
                   const float *k2, const float *v2, int n2, float *att) {
    const float scale = 1.0f / sqrtf((float)hs);
    for (int t = 0; t < n_t + n2; t++) {
        const float *kt = t < n_t ? k + (size_t)t * kv_stride : k2 + (size_t)(t - n_t) * kv_stride;
        float score = 0.0f;
        for (int i = 0; i < hs; i++) score += q[i] * kt[i];
        att[t] = score * scale;
    }
    softmax(att, n_t + n2);
    memset(out, 0, sizeof(float) * hs);
    for (int t = 0; t < n_t + n2; t++) {
        const float *vt = t < n_t ? v + (size_t)t * kv_stride : v2 + (size_t)(t - n_t) * kv_stride;
        for (int i = 0; i < hs; i++) out[i] += att[t] * vt[i];
    }
}

/* Attention for jobs that share their first m positions of k and v: head sizes of 16, 32,
 * 64 and 128 (nearly every model) on whole vectors (attend_block_vec), others job by job
 * through attend. */
static void attend_block(const att_job *jobs, int nj, int m, const float *k, const float *v, int kv_stride, int hs) {
    const float scale = 1.0f / sqrtf((float)hs);
    const int m16 = m / 16 * 16;  /* whole score blocks (AW positions) on every width */
    switch (hs) {
    case 16: attend_block_vec(jobs, nj, m16, k, v, kv_stride, scale, 16 / AW); return;
    case 32: attend_block_vec(jobs, nj, m16, k, v, kv_stride, scale, 32 / AW); return;
    case 64: attend_block_vec(jobs, nj, m16, k, v, kv_stride, scale, 64 / AW); return;
    case 128: attend_block_vec(jobs, nj, m16, k, v, kv_stride, scale, 128 / AW); return;
    default: break;
    }
    for (int j = 0; j < nj; j++)
        attend(jobs[j].out, jobs[j].q, k, v, kv_stride, hs, jobs[j].n1, jobs[j].k2, jobs[j].v2, jobs[j].n2, jobs[j].att);
}

/* ============================================================ forward pass
 * One pass over `rows` token positions: row r is token tok[r] at position pos[r] of slot
 * slot[r]. Rows of one slot must be consecutive positions in order (a prefill), or each
 * slot appears once (a decode). Every row's K/V is written to its slot's cache before any
 * attention, so causal attention reads positions 0..pos[r] of its own slot only.
 *
 * Branches (br != NULL, see colibri_prefill_branches): row r's K/V goes to cache row
 * br->row[r] instead of pos[r], and it attends to the slot's first br->prefix rows and then
 * to its own branch's rows br->own[r]..br->row[r]; RoPE still uses pos[r]. */
typedef struct { int prefix; const int *row, *own; } branch_rows;

typedef struct {
    colibri_engine *e; const int *slot, *pos; const branch_rows *br; const int *block; int n_blocks, l;
    atomic_int next;
} att_ctx;

/* The attention work items of one layer, taken one at a time by each thread (dynamic). */
static void att_part(void *arg, int tid, int nt) {
    (void)tid, (void)nt;
    att_ctx *ac = arg;
    colibri_engine *e = ac->e;
    const colibri_config *c = &e->cfg;
    scratch *s = &e->s;
    const int *slot = ac->slot, *pos = ac->pos, *block = ac->block, l = ac->l;
    const branch_rows *br = ac->br;
    const int hs = e->head_size, kvd = e->kv_dim, qd = e->q_dim, qkvd = qd + 2 * kvd, kv_mul = c->n_heads / c->n_kv_heads;
    for (int it; (it = atomic_fetch_add(&ac->next, 1)) < ac->n_blocks * c->n_kv_heads;) {
        int b = it / c->n_kv_heads, g = it % c->n_kv_heads, r0 = block[b], r1 = block[b + 1];
        const slot_state *st = &e->slots[slot[r0]];
        const float *kbase = st->key_cache + (size_t)l * c->n_ctx * kvd + g * hs;
        const float *vbase = st->value_cache + (size_t)l * c->n_ctx * kvd + g * hs;
        att_job jobs[ATT_ROWS * kv_mul];
        int nj = 0, shared = c->n_ctx;
        for (int r = r0; r < r1; r++) {
            int n1 = br ? br->prefix : pos[r] + 1, n2 = br ? br->row[r] - br->own[r] + 1 : 0;
            size_t own = br ? (size_t)br->own[r] * kvd : 0;
            if (n1 < shared) shared = n1;
            for (int h = g * kv_mul; h < (g + 1) * kv_mul; h++)
                jobs[nj++] = (att_job){s->att_out + (size_t)r * qd + h * hs, s->qkv + (size_t)r * qkvd + h * hs,
                                       s->att + ((size_t)r * c->n_heads + h) * c->n_ctx, n1, kbase + own,
                                       vbase + own, n2};
        }
        attend_block(jobs, nj, shared, kbase, vbase, kvd, hs);
    }
}

static void forward(colibri_engine *e, int rows, const int *slot, const int *pos, const int *tok,
                    const branch_rows *br) {
    const colibri_config *c = &e->cfg;
    const int dim = c->dim, hs = e->head_size, kvd = e->kv_dim, qd = e->q_dim, hid = c->hidden_dim, qkvd = qd + 2 * kvd;
    const int half = hs / 2, T = e->n_threads;
    scratch *s = &e->s;

    const table *emb = &e->w.token_embedding;
    for (int r = 0; r < rows; r++) to_f32(emb->dtype, emb->rows + (size_t)tok[r] * emb->row_bytes, dim, s->x + (size_t)r * dim);

    /* Attention blocks: runs of up to ATT_ROWS consecutive rows of one slot. */
    int block[rows + 1], n_blocks = 0;
    for (int r = 0; r < rows; r++)
        if (r == 0 || slot[r] != slot[block[n_blocks - 1]] || r - block[n_blocks - 1] == ATT_ROWS) block[n_blocks++] = r;
    block[n_blocks] = rows;

    for (int l = 0; l < c->n_layers; l++) {
        for (int r = 0; r < rows; r++)
            rmsnorm(s->xb + (size_t)r * dim, s->x + (size_t)r * dim, e->w.attn_norm[l], dim, c->norm_eps);
        matmul(e, s->qkv, s->xb, &e->w.wqkv[l], rows);
        for (int r = 0; r < rows; r++) {
            const float *cr = e->rope_cos + (size_t)pos[r] * half, *sr = e->rope_sin + (size_t)pos[r] * half;
            float *q = s->qkv + (size_t)r * qkvd, *k = q + qd, *v = k + kvd;
            rope(q, c->n_heads, hs, e->rope_interleaved, cr, sr);
            rope(k, c->n_kv_heads, hs, e->rope_interleaved, cr, sr);
            slot_state *st = &e->slots[slot[r]];
            size_t off = ((size_t)l * c->n_ctx + (br ? br->row[r] : pos[r])) * kvd;
            memcpy(st->key_cache + off, k, sizeof(float) * kvd);
            memcpy(st->value_cache + off, v, sizeof(float) * kvd);
        }
        /* One work item per (block of up to ATT_ROWS rows of one slot, kv head): the block's
         * query heads sharing that K/V head read the history they share once, chunk by
         * chunk (attend_block), instead of once per row and head. */
        att_ctx ac = {e, slot, pos, br, block, n_blocks, l, 0};
        if (T > 1 && (long)rows * c->n_heads * (pos[rows - 1] + 1) * hs >= PARALLEL_MIN_WORK)
            pool_run(e->pool, T, att_part, &ac);
        else
            att_part(&ac, 0, 1);
        matmul(e, s->xb, s->att_out, &e->w.wo[l], rows);
        for (size_t i = 0; i < (size_t)rows * dim; i++) s->x[i] += s->xb[i];

        for (int r = 0; r < rows; r++)
            rmsnorm(s->xb + (size_t)r * dim, s->x + (size_t)r * dim, e->w.ffn_norm[l], dim, c->norm_eps);
        matmul(e, s->gu, s->xb, &e->w.w_gate_up[l], rows);
        for (int r = 0; r < rows; r++) {
            const float *gate = s->gu + (size_t)r * 2 * hid, *up = gate + hid;
            swiglu(s->hb + (size_t)r * hid, gate, up, hid);
        }
        matmul(e, s->xb, s->hb, &e->w.w_down[l], rows);
        for (size_t i = 0; i < (size_t)rows * dim; i++) s->x[i] += s->xb[i];
    }
}

/* Final norm + output projection for chosen rows of the last forward pass. */
static void logits_for(colibri_engine *e, const int *which, int n, float *out) {
    const colibri_config *c = &e->cfg;
    scratch *s = &e->s;
    for (int i = 0; i < n; i++)
        rmsnorm(s->xb + (size_t)i * c->dim, s->x + (size_t)which[i] * c->dim, e->w.final_norm, c->dim, c->norm_eps);
    matmul(e, out, s->xb, &e->w.lm_head, n);
}

/* ============================================================ loading */

static const tensor_info *find(const tensor_info *ts, int n, const char *name) {
    for (int i = 0; i < n; i++) if (strcmp(ts[i].name, name) == 0) return &ts[i];
    return NULL;
}

/* Finds a tensor of the expected 1-D or 2-D shape whose bytes lie inside the data section;
 * *src receives them. */
static int locate(const tensor_info *ts, int nt, const char *data, size_t data_size, const char *name, long d0,
                  long d1, const tensor_info **found, const char **src) {
    const tensor_info *t = find(ts, nt, name);
    if (!t) return COLIBRI_E_MISSING_TENSOR;
    int want_ndim = d1 ? 2 : 1;
    if (t->ndim != want_ndim || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) return COLIBRI_E_SHAPE;
    if (t->dtype == DT_OTHER) return COLIBRI_E_DTYPE;
    size_t bytes = dtype_bytes(t->dtype, (size_t)d0 * (size_t)(d1 ? d1 : 1));
    if (!bytes || t->end < t->begin || t->end > data_size || t->end - t->begin != bytes) return COLIBRI_E_FORMAT;
    *found = t;
    *src = data + t->begin;
    return COLIBRI_OK;
}

/* Resolves a tensor of the expected 1-D or 2-D shape to an F32 pointer (converting if needed). */
static int bind(colibri_engine *e, const tensor_info *ts, int nt, const char *data, size_t data_size,
                const char *name, long d0, long d1, float **out) {
    const tensor_info *t;
    const char *src;
    int rc = locate(ts, nt, data, data_size, name, d0, d1, &t, &src);
    if (rc) return rc;
    if (t->dtype == DT_F32 && ((uintptr_t)src % 4) == 0) {
        *out = (float *)src;
        return COLIBRI_OK;
    }
    size_t count = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    float *dst = malloc(count * sizeof(float));
    if (!dst) return COLIBRI_E_NOMEM;
    to_f32(t->dtype, src, count, dst);
    e->owned[e->n_owned++] = dst;
    *out = dst;
    return COLIBRI_OK;
}

/* The token embedding (vocab, dim) as stored: rows are converted when used. */
static int bind_table(const tensor_info *ts, int nt, const char *data, size_t data_size, const char *name, long vocab,
                      long dim, table *out) {
    const tensor_info *t;
    const char *src;
    int rc = locate(ts, nt, data, data_size, name, vocab, dim, &t, &src);
    if (rc) return rc;
    out->dtype = t->dtype;
    out->rows = src;
    out->row_bytes = dtype_bytes(t->dtype, (size_t)dim);
    return out->row_bytes ? COLIBRI_OK : COLIBRI_E_SHAPE;  /* a block type needs whole blocks per row */
}

/* Repacks W (d, n) into the engine's own panels (see `matrix`), of floats or of bfloat16 (the
 * values must then be bfloat16 values: their low 16 bits are dropped), as pairs (W_BF16P) when
 * the kernel path multiplies bfloat16 pairs. W may be several matrices stacked by rows (src[0]
 * with d_of[0] rows, then src[1], ...): a fused projection. */
static int pack(colibri_engine *e, const float *const *src, const long *d_of, int n_src, long n, wkind kind,
                matrix *out) {
    long d = 0;
    for (int i = 0; i < n_src; i++) d += d_of[i];
    if (kind == W_BF16 && e->kernel_path == COLIBRI_KERNELS_AVX512BF16) kind = W_BF16P;  /* runnable: it has pairs */
    const int bf16 = kind == W_BF16 || kind == W_BF16P;
    /* n2: the values a panel holds per output column, n rounded up to whole pairs for W_BF16P */
    const size_t esize = bf16 ? sizeof(uint16_t) : sizeof(float), n2 = kind == W_BF16P ? (size_t)(n + 1) / 2 * 2 : (size_t)n;
    size_t n_panels = (size_t)(d + PANEL - 1) / PANEL, size = n_panels * n2 * PANEL * esize;
    char *p = aligned_alloc(64, size);  /* size is a multiple of 32: PANEL elements per row */
    if (!p) return COLIBRI_E_NOMEM;
    memset(p, 0, size);
    long col = 0;
    for (int i = 0; i < n_src; i++)
        for (long row = 0; row < d_of[i]; row++, col++) {
            /* element j of column col: panels (col / 16, n2, 16), or pairs (col / 16, n2 / 2, 16, 2) */
            const size_t panel = (size_t)(col / PANEL) * n2 * PANEL, c = (size_t)(col % PANEL);
            for (long j = 0; j < n; j++) {
                const size_t at = kind == W_BF16P ? panel + ((size_t)j / 2 * PANEL + c) * 2 + (size_t)j % 2
                                                  : panel + (size_t)j * PANEL + c;
                float v = src[i][(size_t)row * n + j];
                if (bf16) {
                    uint32_t bits;
                    memcpy(&bits, &v, 4);
                    ((uint16_t *)p)[at] = (uint16_t)(bits >> 16);
                } else {
                    ((float *)p)[at] = v;
                }
            }
        }
    e->owned[e->n_owned++] = (float *)p;
    *out = (matrix){.kind = kind, .n = (int)n, .d = (int)d, .p = p};
    return COLIBRI_OK;
}

/* Drops the pages of [p, p + bytes) if they belong to the file mapping: once a tensor is
 * packed its mapped pages are dead weight, and releasing them as we go keeps peak memory at
 * about one copy of the weights while loading. */
static void release_pages(const colibri_engine *e, const void *p, size_t bytes) {
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes, base = (uintptr_t)e->map, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (lo < base || hi > base + e->map_size) return;  /* a converted copy, not the mapping */
    lo = (lo + page - 1) / page * page;
    hi = hi / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Binds the named tensors (each (d_of[i], n)) and packs them stacked; copies that bind made
 * to convert them are freed once packed. */
static int bind_packed(colibri_engine *e, const tensor_info *ts, int nt, const char *data, size_t data_size,
                       const char *const *names, const long *d_of, int n_src, long n, wkind kind, matrix *out) {
    int before = e->n_owned, rc = COLIBRI_OK;
    float *raw[3];
    for (int i = 0; i < n_src && !rc; i++) rc = bind(e, ts, nt, data, data_size, names[i], d_of[i], n, &raw[i]);
    if (!rc) rc = pack(e, (const float *const *)raw, d_of, n_src, n, kind, out);
    if (rc) return rc;
    for (int i = 0; i < n_src; i++) release_pages(e, raw[i], (size_t)d_of[i] * (size_t)n * sizeof(float));
    int converted = e->n_owned - 1 - before;
    for (int i = 0; i < converted; i++) free(e->owned[before + i]);
    e->owned[before] = e->owned[e->n_owned - 1];
    e->n_owned = before + 1;
    return COLIBRI_OK;
}

/* A type whose blocks have the (scale, min) form of unpack_block; 4-bit ones pack as nibbles. */
static int blockable(dtype_t t) { return t >= DT_Q8_0 && t <= DT_Q5_K; }
static int four_bit(dtype_t t) { return t == DT_Q4_0 || t == DT_Q4_1 || t == DT_Q4_K || t == DT_Q2_K || t == DT_Q3_K; }

/* Copies the named block-type tensors (each (d_of[i], n), of blockable or per_half types)
 * stacked into one block matrix (see `matrix`): W_Q16 if any is per_half, else W_Q32; its
 * quants as nibbles if every part's fit in 4 bits. The file's pages are released as it goes. */
static int bind_blocks(colibri_engine *e, const tensor_info *const *tsr, const char *const *src, const long *d_of,
                       int n_src, long n, matrix *out) {
    long d = 0;
    int q4 = 1, half = 0, narrow = 1, q8 = 1;
    for (int i = 0; i < n_src; i++) {
        q8 = q8 && tsr[i]->dtype == DT_Q8_0;
        d += d_of[i];
        q4 = q4 && four_bit(tsr[i]->dtype);
        half = half || per_half(tsr[i]->dtype);
        narrow = narrow && tsr[i]->dtype != DT_Q8_0;
    }
    const int qbytes = q4 ? 16 : 32, per = half ? 2 : 1;
    const size_t nb = (size_t)n / 32, quants = (size_t)d * nb * qbytes, floats = (size_t)d * nb * per;
    size_t size = (quants + 2 * floats * sizeof(float) + 63) / 64 * 64;
    char *p = aligned_alloc(64, size);
    if (!p) return COLIBRI_E_NOMEM;
    unsigned char *q = (unsigned char *)p, v[32];
    float *scale = (float *)(p + quants), *min = scale + floats;  /* quants is a multiple of 16: aligned */
    size_t blk = 0;
    for (int i = 0; i < n_src; i++) {
        for (size_t b = 0; b < (size_t)d_of[i] * nb; b++, blk++) {
            unsigned char *qo = q + blk * qbytes;
            if (half)
                unpack_halves(tsr[i]->dtype, src[i], b, v, &scale[2 * blk], &min[2 * blk]);
            else
                unpack_block(tsr[i]->dtype, src[i], b, v, &scale[blk], &min[blk]);
            if (q4)
                for (int j = 0; j < 16; j++) qo[j] = (unsigned char)(v[j] | v[j + 16] << 4);
            else
                memcpy(qo, v, 32);
        }
        release_pages(e, src[i], (size_t)(tsr[i]->end - tsr[i]->begin));
    }
    e->owned[e->n_owned++] = (float *)p;
    *out = (matrix){.kind = half ? W_Q16 : W_Q32, .n = (int)n, .d = (int)d, .p = p, .scale = scale,
                    .min = min, .narrow = narrow, .nibbles = q4, .q8 = q8 && !half};
    return COLIBRI_OK;
}

/* Binds a (possibly fused) projection in the best form its tensors allow: block types stay
 * quantized when every part is one, BF16 stays BF16 when every part is; anything else (mixed
 * float and block types) or cfg.dequantize set becomes F32 panels. */
static int bind_matrix(colibri_engine *e, const tensor_info *ts, int nt, const char *data, size_t data_size,
                       const char *const *names, const long *d_of, int n_src, long n, matrix *out) {
    const tensor_info *t[3];
    const char *src[3];
    int blocks = !e->cfg.dequantize, bf16 = !e->cfg.dequantize;
    for (int i = 0; i < n_src; i++) {
        int rc = locate(ts, nt, data, data_size, names[i], d_of[i], n, &t[i], &src[i]);
        if (rc) return rc;
        blocks = blocks && (blockable(t[i]->dtype) || per_half(t[i]->dtype));
        bf16 = bf16 && t[i]->dtype == DT_BF16;
    }
    if (blocks) return bind_blocks(e, t, src, d_of, n_src, n, out);
    return bind_packed(e, ts, nt, data, data_size, names, d_of, n_src, n, bf16 ? W_BF16 : W_F32, out);
}

/* The head width: given, or dim / n_heads (then n_heads must divide dim); 0 if invalid. */
static int head_width(const colibri_config *c) {
    if (c->head_dim > 0) return c->head_dim;
    if (c->head_dim < 0 || c->n_heads <= 0 || c->dim % c->n_heads) return 0;
    return c->dim / c->n_heads;
}

static int check_config(const colibri_config *c) {
    int hs = head_width(c);
    if (c->dim <= 0 || c->hidden_dim <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0
        || c->vocab_size <= 0 || c->n_ctx <= 0 || c->n_heads % c->n_kv_heads
        || hs <= 0 || hs % 2 || c->rope_theta <= 0 || c->norm_eps <= 0)
        return COLIBRI_E_CONFIG;
    if (c->kernels < COLIBRI_KERNELS_BEST || c->kernels > COLIBRI_KERNELS_AVX512BF16) return COLIBRI_E_ARG;
    if (c->rope_inv_freq)
        for (int i = 0; i < hs / 2; i++)
            if (!(c->rope_inv_freq[i] > 0) || !isfinite(c->rope_inv_freq[i])) return COLIBRI_E_CONFIG;
    return COLIBRI_OK;
}

int colibri_load(const char *path, const colibri_config *cfg, int n_slots, int n_threads, colibri_engine **out) {
    if (!out) return COLIBRI_E_ARG;
    *out = NULL;
    if (!path || !cfg) return COLIBRI_E_ARG;
    if (n_slots < 1 || n_slots > COLIBRI_MAX_SLOTS) return COLIBRI_E_SLOT;
    int rc = check_config(cfg);
    if (rc) return rc;

    int fd = open(path, O_RDONLY);
    if (fd < 0) return COLIBRI_E_IO;
    struct stat sb;
    if (fstat(fd, &sb) != 0) { close(fd); return COLIBRI_E_IO; }
    size_t size = (size_t)sb.st_size;
    if (size < 8) { close(fd); return COLIBRI_E_FORMAT; }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return COLIBRI_E_IO;

    colibri_engine *e = calloc(1, sizeof *e);
    if (!e) { munmap(map, size); return COLIBRI_E_NOMEM; }
    e->map = map;
    e->map_size = size;
    e->cfg = *cfg;
    e->cfg.rope_inv_freq = NULL;  /* the caller's array is only read below, never kept */
    e->head_size = head_width(cfg);
    e->cfg.head_dim = e->head_size;
    e->kv_dim = cfg->n_kv_heads * e->head_size;
    e->q_dim = cfg->n_heads * e->head_size;
    e->max_in = cfg->dim > e->q_dim ? cfg->dim : e->q_dim;
    e->max_in = cfg->hidden_dim > e->max_in ? cfg->hidden_dim : e->max_in;
    e->n_slots = n_slots;
    e->kernel_path = cpu_kernel_path(cfg->kernels);
    e->kernels = &KERNEL_SETS[e->kernel_path];
    e->n_threads = n_threads > 0 ? n_threads : pool_cores();

    tensor_info *ts = NULL;
    int nt = 0;
    const char *data;
    size_t data_size;
    if (memcmp(map, "GGUF", 4) == 0) {
        size_t off = 0;
        rc = gguf_parse(map, size, &ts, &nt, &off);
        if (rc) goto fail;
        data = (const char *)map + off;
        data_size = size - off;
        /* GGUF's llama q/k rows pair adjacent values for RoPE (the layout Meta released),
         * not the halves Hugging Face pairs. */
        e->rope_interleaved = 1;
    } else {
        uint64_t hlen = 0;
        memcpy(&hlen, map, 8);  /* little-endian hosts only, as every supported target is */
        if (hlen == 0 || hlen > size - 8) { rc = COLIBRI_E_FORMAT; goto fail; }
        rc = st_parse((const char *)map + 8, (size_t)hlen, &ts, &nt);
        if (rc) goto fail;
        data = (const char *)map + 8 + hlen;
        data_size = size - 8 - hlen;
    }

    int L = cfg->n_layers;
    e->owned = calloc((size_t)(10 * L + 8), sizeof(float *));
    e->w.attn_norm = calloc((size_t)L, sizeof(float *)); e->w.ffn_norm = calloc((size_t)L, sizeof(float *));
    e->w.wqkv = calloc((size_t)L, sizeof(matrix)); e->w.wo = calloc((size_t)L, sizeof(matrix));
    e->w.w_gate_up = calloc((size_t)L, sizeof(matrix));
    e->w.w_down = calloc((size_t)L, sizeof(matrix));
    if (!e->owned || !e->w.attn_norm || !e->w.ffn_norm || !e->w.wqkv || !e->w.wo || !e->w.w_gate_up
        || !e->w.w_down) { rc = COLIBRI_E_NOMEM; goto fail; }

    long D = cfg->dim, H = cfg->hidden_dim, V = cfg->vocab_size, Q = e->q_dim, K = e->kv_dim;
#define BIND(name, d0, d1, dst) do { rc = bind(e, ts, nt, data, data_size, name, d0, d1, dst); if (rc) goto fail; } while (0)
    rc = bind_table(ts, nt, data, data_size, "model.embed_tokens.weight", V, D, &e->w.token_embedding);
    if (rc) goto fail;
    BIND("model.norm.weight", D, 0, &e->w.final_norm);
#define PBIND(names, d_of, count, n_in, dst) do { rc = bind_matrix(e, ts, nt, data, data_size, names, d_of, count, n_in, dst); if (rc) goto fail; } while (0)
    const long vocab_rows[1] = {V}, qkv_rows[3] = {Q, K, K}, gate_up_rows[2] = {H, H}, dim_rows[1] = {D};
    const char *head[1] = {cfg->tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"};
    PBIND(head, vocab_rows, 1, D, &e->w.lm_head);
    for (int l = 0; l < L; l++) {
        const char *suffix[9] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                 "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                 "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                 "mlp.down_proj.weight"};
        char n[9][160];
        for (int i = 0; i < 9; i++) snprintf(n[i], sizeof n[i], "model.layers.%d.%s", l, suffix[i]);
        const char *qkv[3] = {n[2], n[3], n[4]}, *o[1] = {n[5]}, *gate_up[2] = {n[6], n[7]}, *down[1] = {n[8]};
        BIND(n[0], D, 0, &e->w.attn_norm[l]);
        BIND(n[1], D, 0, &e->w.ffn_norm[l]);
        PBIND(qkv, qkv_rows, 3, D, &e->w.wqkv[l]);
        PBIND(o, dim_rows, 1, Q, &e->w.wo[l]);
        PBIND(gate_up, gate_up_rows, 2, D, &e->w.w_gate_up[l]);
        PBIND(down, dim_rows, 1, H, &e->w.w_down[l]);
    }
#undef BIND
#undef PBIND
    free(ts);
    ts = NULL;
    /* The projections' pages went as each was packed; what stays mapped is the embedding
     * table and the norms. Drop those pages too: a row faults back in when a token uses it,
     * so a large vocabulary keeps resident only the rows text actually meets. */
    madvise(map, size, MADV_DONTNEED);

    int half = e->head_size / 2;
    e->rope_cos = malloc(sizeof(float) * (size_t)cfg->n_ctx * half);
    e->rope_sin = malloc(sizeof(float) * (size_t)cfg->n_ctx * half);
    if (!e->rope_cos || !e->rope_sin) { rc = COLIBRI_E_NOMEM; goto fail; }
    for (int p = 0; p < cfg->n_ctx; p++)
        for (int i = 0; i < half; i++) {
            double freq = cfg->rope_inv_freq ? (double)cfg->rope_inv_freq[i]
                                             : pow((double)cfg->rope_theta, -2.0 * i / e->head_size);
            e->rope_cos[(size_t)p * half + i] = (float)cos(p * freq);
            e->rope_sin[(size_t)p * half + i] = (float)sin(p * freq);
        }
    size_t cache = (size_t)L * cfg->n_ctx * e->kv_dim;
    for (int sidx = 0; sidx < n_slots; sidx++) {
        slot_state *st = &e->slots[sidx];
        st->key_cache = calloc(cache, sizeof(float));
        st->value_cache = calloc(cache, sizeof(float));
        st->tokens = calloc((size_t)cfg->n_ctx, sizeof(int));
        if (!st->key_cache || !st->value_cache || !st->tokens) { rc = COLIBRI_E_NOMEM; goto fail; }
    }
    rc = ensure_scratch(e, 1);
    if (rc) goto fail;
    if (e->n_threads > 1 && !(e->pool = pool_new(e->n_threads))) { rc = COLIBRI_E_NOMEM; goto fail; }
    *out = e;
    return COLIBRI_OK;
fail:
    free(ts);
    colibri_free(e);
    return rc;
}

void colibri_free(colibri_engine *e) {
    if (!e) return;
    for (int i = 0; i < e->n_owned; i++) free(e->owned[i]);
    free(e->owned);
    free(e->w.attn_norm); free(e->w.ffn_norm); free(e->w.wqkv); free(e->w.wo);
    free(e->w.w_gate_up); free(e->w.w_down);
    for (int i = 0; i < COLIBRI_MAX_SLOTS; i++) {
        free(e->slots[i].key_cache); free(e->slots[i].value_cache); free(e->slots[i].tokens);
    }
    free_scratch(&e->s);
    free(e->rope_cos); free(e->rope_sin);
    if (e->map) munmap(e->map, e->map_size);
    pool_free(e->pool);
    free(e);
}

/* ============================================================ public API */

const colibri_config *colibri_get_config(const colibri_engine *e) { return e ? &e->cfg : NULL; }

int colibri_threads(const colibri_engine *e) { return e ? e->n_threads : COLIBRI_E_ARG; }

int colibri_kernels(const colibri_engine *e) { return e ? e->kernel_path : COLIBRI_E_ARG; }

static int bad_slot(const colibri_engine *e, int slot) { return !e || slot < 0 || slot >= e->n_slots; }

int colibri_slot_len(const colibri_engine *e, int slot) {
    return bad_slot(e, slot) ? COLIBRI_E_SLOT : e->slots[slot].len;
}

int colibri_slot_tokens(const colibri_engine *e, int slot, int *out, int cap) {
    if (bad_slot(e, slot)) return COLIBRI_E_SLOT;
    if (!out || cap < 0) return COLIBRI_E_ARG;
    int n = e->slots[slot].len < cap ? e->slots[slot].len : cap;
    memcpy(out, e->slots[slot].tokens, sizeof(int) * (size_t)n);
    return n;
}

int colibri_slot_truncate(colibri_engine *e, int slot, int n) {
    if (bad_slot(e, slot)) return COLIBRI_E_SLOT;
    if (n < 0 || n > e->slots[slot].len) return COLIBRI_E_ARG;
    e->slots[slot].len = n;
    return COLIBRI_OK;
}

/* Slot state layout: i32 n_layers, i32 kv_dim, i32 len, len x i32 tokens, then for each
 * layer len x kv_dim floats of keys followed by len x kv_dim floats of values. */
long colibri_slot_state_size(const colibri_engine *e, int slot) {
    if (bad_slot(e, slot)) return COLIBRI_E_SLOT;
    long len = e->slots[slot].len;
    return 12 + 4 * len + 8L * e->cfg.n_layers * len * e->kv_dim;
}

int colibri_slot_save(const colibri_engine *e, int slot, void *buf, size_t cap) {
    long size = colibri_slot_state_size(e, slot);
    if (size < 0) return (int)size;
    if (!buf || cap < (size_t)size) return COLIBRI_E_ARG;
    const slot_state *st = &e->slots[slot];
    char *p = buf;
    int32_t head[3] = {e->cfg.n_layers, e->kv_dim, st->len};
    memcpy(p, head, 12); p += 12;
    memcpy(p, st->tokens, 4 * (size_t)st->len); p += 4 * (size_t)st->len;
    size_t row = (size_t)st->len * e->kv_dim * sizeof(float);
    for (int l = 0; l < e->cfg.n_layers; l++) {
        size_t off = (size_t)l * e->cfg.n_ctx * e->kv_dim;
        memcpy(p, st->key_cache + off, row); p += row;
        memcpy(p, st->value_cache + off, row); p += row;
    }
    return COLIBRI_OK;
}

int colibri_slot_load(colibri_engine *e, int slot, const void *buf, size_t n) {
    if (bad_slot(e, slot)) return COLIBRI_E_SLOT;
    if (!buf || n < 12) return COLIBRI_E_FORMAT;
    int32_t head[3];
    memcpy(head, buf, 12);
    if (head[0] != e->cfg.n_layers || head[1] != e->kv_dim || head[2] < 0 || head[2] > e->cfg.n_ctx)
        return COLIBRI_E_FORMAT;
    size_t len = (size_t)head[2], row = len * e->kv_dim * sizeof(float);
    if (n != 12 + 4 * len + 2 * row * (size_t)e->cfg.n_layers) return COLIBRI_E_FORMAT;
    const char *p = (const char *)buf + 12;
    slot_state *st = &e->slots[slot];
    for (size_t i = 0; i < len; i++) {
        int32_t tok;
        memcpy(&tok, p + 4 * i, 4);
        if (tok < 0 || tok >= e->cfg.vocab_size) return COLIBRI_E_FORMAT;
    }
    memcpy(st->tokens, p, 4 * len); p += 4 * len;
    for (int l = 0; l < e->cfg.n_layers; l++) {
        size_t off = (size_t)l * e->cfg.n_ctx * e->kv_dim;
        memcpy(st->key_cache + off, p, row); p += row;
        memcpy(st->value_cache + off, p, row); p += row;
    }
    st->len = (int)len;
    return COLIBRI_OK;
}

/* Prefill runs in chunks so scratch stays bounded (attention scores are rows * heads * n_ctx). */
#define PREFILL_CHUNK 256

int colibri_prefill(colibri_engine *e, int slot, const int *tokens, int n, int flags, int *n_reused,
                    float *logits_out) {
    if (bad_slot(e, slot)) return COLIBRI_E_SLOT;
    if (!tokens || n <= 0) return COLIBRI_E_ARG;
    const colibri_config *c = &e->cfg;
    if (n > c->n_ctx) return COLIBRI_E_CONTEXT;
    for (int i = 0; i < n; i++) if (tokens[i] < 0 || tokens[i] >= c->vocab_size) return COLIBRI_E_ARG;
    slot_state *st = &e->slots[slot];
    int keep = 0;
    if (!(flags & COLIBRI_PREFILL_NO_REUSE)) {
        int lim = st->len < n - 1 ? st->len : n - 1;  /* the last position is always recomputed: we need its logits */
        while (keep < lim && st->tokens[keep] == tokens[keep]) keep++;
    }
    st->len = keep;
    if (n_reused) *n_reused = keep;
    int rc = ensure_scratch(e, PREFILL_CHUNK);
    if (rc) return rc;
    int slots_row[PREFILL_CHUNK], pos[PREFILL_CHUNK];
    for (int start = keep; start < n; start += PREFILL_CHUNK) {
        int rows = n - start < PREFILL_CHUNK ? n - start : PREFILL_CHUNK;
        for (int r = 0; r < rows; r++) { slots_row[r] = slot; pos[r] = start + r; }
        forward(e, rows, slots_row, pos, tokens + start, NULL);
        memcpy(st->tokens + start, tokens + start, sizeof(int) * (size_t)rows);
        st->len = start + rows;
        if (logits_out && (flags & COLIBRI_PREFILL_ALL_LOGITS)) {
            int which[PREFILL_CHUNK];
            for (int r = 0; r < rows; r++) which[r] = r;
            logits_for(e, which, rows, logits_out + (size_t)(start - keep) * c->vocab_size);
        } else if (logits_out && start + rows == n) {
            int last = rows - 1;
            logits_for(e, &last, 1, logits_out);
        }
    }
    return COLIBRI_OK;
}

int colibri_prefill_branches(colibri_engine *e, int slot, int n_branches, const int *lens, const int *tokens,
                             float *logits_out) {
    if (bad_slot(e, slot)) return COLIBRI_E_SLOT;
    if (!lens || !tokens || !logits_out || n_branches <= 0) return COLIBRI_E_ARG;
    const colibri_config *c = &e->cfg;
    const slot_state *st = &e->slots[slot];
    const int prefix = st->len;
    long total = 0;
    for (int b = 0; b < n_branches; b++) {
        if (lens[b] <= 0) return COLIBRI_E_ARG;
        total += lens[b];
    }
    /* The branches' rows sit side by side after the history, so all of them must fit. */
    if (prefix + total > c->n_ctx) return COLIBRI_E_CONTEXT;
    for (long i = 0; i < total; i++) if (tokens[i] < 0 || tokens[i] >= c->vocab_size) return COLIBRI_E_ARG;
    int rc = ensure_scratch(e, PREFILL_CHUNK);
    if (rc) return rc;
    int slots_row[PREFILL_CHUNK], pos[PREFILL_CHUNK], row[PREFILL_CHUNK], own[PREFILL_CHUNK], last[PREFILL_CHUNK];
    int b = 0, i = 0;  /* the branch and the index within it of the next row */
    long done = 0;
    while (done < total) {
        int rows = total - done < PREFILL_CHUNK ? (int)(total - done) : PREFILL_CHUNK, n_last = 0;
        for (int r = 0; r < rows; r++) {
            slots_row[r] = slot;
            pos[r] = prefix + i;                     /* where the branch's token stands in its own prompt */
            row[r] = prefix + (int)(done + r);       /* where its K/V is kept meanwhile */
            own[r] = row[r] - i;
            if (++i == lens[b]) { last[n_last++] = r; i = 0; b++; }
        }
        branch_rows br = {prefix, row, own};
        forward(e, rows, slots_row, pos, tokens + done, &br);
        if (n_last) logits_for(e, last, n_last, logits_out + (size_t)(b - n_last) * c->vocab_size);
        done += rows;
    }
    return COLIBRI_OK;
}

int colibri_decode(colibri_engine *e, int n, const int *slots, const int *tokens, float *logits_out) {
    if (!e || !slots || !tokens || n <= 0 || n > e->n_slots) return COLIBRI_E_ARG;
    int pos[COLIBRI_MAX_SLOTS], which[COLIBRI_MAX_SLOTS], seen = 0;
    for (int i = 0; i < n; i++) {
        if (bad_slot(e, slots[i]) || (seen & (1 << slots[i]))) return COLIBRI_E_SLOT;
        seen |= 1 << slots[i];
        if (tokens[i] < 0 || tokens[i] >= e->cfg.vocab_size) return COLIBRI_E_ARG;
        if (e->slots[slots[i]].len == 0) return COLIBRI_E_STATE;
        if (e->slots[slots[i]].len >= e->cfg.n_ctx) return COLIBRI_E_CONTEXT;
        pos[i] = e->slots[slots[i]].len;
        which[i] = i;
    }
    int rc = ensure_scratch(e, n);
    if (rc) return rc;
    forward(e, n, slots, pos, tokens, NULL);
    for (int i = 0; i < n; i++) {
        slot_state *st = &e->slots[slots[i]];
        st->tokens[st->len++] = tokens[i];
    }
    if (logits_out) logits_for(e, which, n, logits_out);
    return COLIBRI_OK;
}

/* ============================================================ sampling */

static uint64_t next_u64(uint64_t *s) {  /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

typedef struct { float p; int id; } prob_index;

static int by_prob_desc(const void *a, const void *b) {
    float pa = ((const prob_index *)a)->p, pb = ((const prob_index *)b)->p;
    if (pa > pb) return -1;
    if (pa < pb) return 1;
    return ((const prob_index *)a)->id - ((const prob_index *)b)->id;
}

int colibri_sample(const float *logits, int vocab, float temperature, float top_p, uint64_t *rng, int *token_out) {
    if (!logits || vocab <= 0 || !token_out) return COLIBRI_E_ARG;
    if (temperature <= 0.0f) {
        int best = 0;
        for (int i = 1; i < vocab; i++) if (logits[i] > logits[best]) best = i;
        *token_out = best;
        return COLIBRI_OK;
    }
    if (!rng || *rng == 0 || !(top_p > 0.0f) || top_p > 1.0f) return COLIBRI_E_ARG;
    prob_index *pi = malloc(sizeof(prob_index) * (size_t)vocab);
    if (!pi) return COLIBRI_E_NOMEM;
    float max = logits[0];
    for (int i = 1; i < vocab; i++) if (logits[i] > max) max = logits[i];
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) {
        pi[i].p = expf((logits[i] - max) / temperature);
        pi[i].id = i;
        sum += pi[i].p;
    }
    qsort(pi, (size_t)vocab, sizeof *pi, by_prob_desc);
    int keep = vocab;
    double cum = 0.0;
    for (int i = 0; i < vocab; i++) {
        cum += pi[i].p / sum;
        if (cum >= top_p) { keep = i + 1; break; }
    }
    double kept = 0.0;
    for (int i = 0; i < keep; i++) kept += pi[i].p;
    double u = (double)(next_u64(rng) >> 11) * (1.0 / 9007199254740992.0) * kept;
    double acc = 0.0;
    int choice = pi[keep - 1].id;
    for (int i = 0; i < keep; i++) {
        acc += pi[i].p;
        if (u < acc) { choice = pi[i].id; break; }
    }
    free(pi);
    *token_out = choice;
    return COLIBRI_OK;
}

int colibri_logprobs(const float *logits, int vocab, int token, int k, float *token_logprob, int *top_ids,
                     float *top_logprobs) {
    if (!logits || vocab <= 0 || token < 0 || token >= vocab || k < 0 || k > COLIBRI_MAX_TOP_K || k > vocab)
        return COLIBRI_E_ARG;
    if ((k > 0 && (!top_ids || !top_logprobs)) || !token_logprob) return COLIBRI_E_ARG;
    float max = logits[0];
    for (int i = 1; i < vocab; i++) if (logits[i] > max) max = logits[i];
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - max);
    float lse = max + (float)log(sum);
    *token_logprob = logits[token] - lse;
    /* top-k by insertion into a small sorted array: k <= 32, vocab passes once */
    int n = 0;
    for (int i = 0; i < vocab && k > 0; i++) {
        float v = logits[i];
        if (n == k && !(v > logits[top_ids[n - 1]])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && v > logits[top_ids[j - 1]]) { top_ids[j] = top_ids[j - 1]; j--; }
        top_ids[j] = i;
    }
    for (int i = 0; i < n; i++) top_logprobs[i] = logits[top_ids[i]] - lse;
    return COLIBRI_OK;
}

const char *colibri_strerror(int status) {
    switch (status) {
    case COLIBRI_OK: return "ok";
    case COLIBRI_E_IO: return "the weights file could not be opened, sized or mapped";
    case COLIBRI_E_FORMAT: return "malformed or truncated weights file (safetensors or GGUF)";
    case COLIBRI_E_MISSING_TENSOR: return "a tensor required by the config is missing";
    case COLIBRI_E_SHAPE: return "a tensor's shape does not match the config";
    case COLIBRI_E_DTYPE: return "unsupported tensor dtype (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are supported)";
    case COLIBRI_E_CONFIG: return "inconsistent model config";
    case COLIBRI_E_NOMEM: return "out of memory";
    case COLIBRI_E_SLOT: return "bad KV slot";
    case COLIBRI_E_CONTEXT: return "the tokens do not fit in the context";
    case COLIBRI_E_ARG: return "argument out of range";
    case COLIBRI_E_STATE: return "call out of order";
    default: return "unknown status";
    }
}
