/* The worker's fragment codec: `workers.transfer.quantize_into` and `Transfer._dequantize`,
 * one fragment (row of k lanes) at a time, in one pass over memory.
 *
 * The numpy versions stay the reference (``workers.quant`` states the arithmetic); the
 * engine's client runs these, and tests/workers/test_codec.py holds the two equal byte for
 * byte. Both are plain IEEE float32/float64 arithmetic in the default rounding mode (no
 * -ffast-math; -fno-math-errno only lets `rintf` be one instruction), which is what numpy
 * does element by element.
 */
#include <math.h>
#include <string.h>

#include "engine.h"

/* Powers of two that keep `lane * 2**power` a normal float32 for every nonzero int32 lane
 * (`workers.transfer._F32_MIN_POWER`, `_F32_MAX_POWER`). */
#define F32_MIN_POWER (-126)
#define F32_MAX_POWER 96

/* Lanes are big-endian on the wire. */
static inline uint32_t
load_be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline void
store_be32(uint8_t *p, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, sizeof v);
}

static inline uint32_t
float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float
bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Each function is compiled twice, for x86-64's baseline and for AVX2, and the loader picks
 * one for the CPU (gcc's function multiversioning): the loops below are plain element-wise
 * code that the AVX2 clone runs 8 lanes at a time. Either gives the same bytes. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* |x| as bits: for a float without its sign, the bits order as the values do, and every NaN
 * is above +inf. */
static inline uint32_t
abs_bits(float x)
{
    return float_bits(x) & 0x7fffffffu;
}

/* Fragment i of `frags` (m x k float32) goes to `rows + i * stride` as k big-endian lanes:
 * `rint(x * 2**(shift - e))` when every |x| < 2**e (NaN never is), else the float32 bits of x
 * with raw[i] = 1 (the caller flags it RAW_FLOAT). */
VECTOR_CLONES void
engine_quantize(const float *frags, Py_ssize_t m, Py_ssize_t k, const int8_t *exponents,
                int shift, uint8_t *rows, Py_ssize_t stride, uint8_t *raw)
{
    for (Py_ssize_t i = 0; i < m; i++) {
        const float *x = frags + i * k;
        uint8_t *lanes = rows + i * stride;
        uint32_t limit = float_bits(ldexpf(1.0f, exponents[i]));
        uint32_t fits = 1;
        for (Py_ssize_t j = 0; j < k; j++)
            fits &= abs_bits(x[j]) < limit; /* |x| < 2**e, and NaN never is */
        raw[i] = (uint8_t)!fits;
        if (!fits) {
            for (Py_ssize_t j = 0; j < k; j++)
                store_be32(lanes + 4 * j, float_bits(x[j]));
            continue;
        }
        float scale = ldexpf(1.0f, shift - exponents[i]);
        for (Py_ssize_t j = 0; j < k; j++)
            store_be32(lanes + 4 * j, (uint32_t)(int32_t)rintf(x[j] * scale));
    }
}

/* Sum i (k big-endian lanes at `sums + i * 4k`) into `out + i * k`: the float32 bits when
 * raw[i], else `lane * 2**(exponent[i] - shift)` (in float32 where that is exact, else the
 * float64 product rounded); peak[i] = max |out| over the row, NaN if any lane is NaN (as
 * numpy's max). */
VECTOR_CLONES void
engine_dequantize(const uint8_t *sums, Py_ssize_t m, Py_ssize_t k, const int64_t *exponents,
                  const uint8_t *raw, int shift, float *out, float *peak)
{
    for (Py_ssize_t i = 0; i < m; i++) {
        const uint8_t *lanes = sums + i * 4 * k;
        float *y = out + i * k;
        int64_t power = exponents[i] - shift;
        if (raw[i]) {
            for (Py_ssize_t j = 0; j < k; j++)
                y[j] = bits_float(load_be32(lanes + 4 * j));
        } else if (power >= F32_MIN_POWER && power <= F32_MAX_POWER) {
            float scale = ldexpf(1.0f, (int)power);
            for (Py_ssize_t j = 0; j < k; j++)
                y[j] = (float)(int32_t)load_be32(lanes + 4 * j) * scale;
        } else {
            double scale = ldexp(1.0, (int)power);
            for (Py_ssize_t j = 0; j < k; j++)
                y[j] = (float)((double)(int32_t)load_be32(lanes + 4 * j) * scale);
        }
        uint32_t top = 0;
        for (Py_ssize_t j = 0; j < k; j++) {
            uint32_t a = abs_bits(y[j]);
            top = a > top ? a : top;
        }
        peak[i] = bits_float(top);  /* a NaN's bits are the largest: the peak is NaN */
    }
}
