/* The prefill attention's score tile and online-softmax update, the same
 * for every ISA but the vector width: st = (Q K^T) * scale for R query rows
 * (a tile, stored transposed in qt: [D][R]) against nb keys, NK keys per
 * register group; then the block's softmax against the running max and sum.
 * A template: included once by cpu_attn_avx2.c and by cpu_attn_avx512.c,
 * each after defining AI, R (lanes), NK and ATTN_VBITS (256 or 512), which
 * picks the vector type AV, its intrinsics' prefix (AV_OP(_fmadd_ps) is
 * _mm256_fmadd_ps in the AVX2 file), AV_EXP_NEG (e^x, x <= 0:
 * cpu_exp_simd.h) and QK_NK(NT), the keys per pass with NT tiles. The
 * intrinsics expand in the ISA's own file, compiled with its own target
 * flags: no call through a pointer in the loop. */
#ifndef MI_CPU_ATTN_QK_H
#define MI_CPU_ATTN_QK_H

#include <math.h>
#include <stdint.h>

#if ATTN_VBITS == 512
#define AV __m512
#define AV_PFX _mm512
#define AV_EXP_NEG exp_neg16
/* with two tiles each broadcast K element feeds two FMAs (16 per 10 loads
 * instead of 8 per 9), which is what limits qk */
#define QK_NK(NT) NK
#else
#define AV __m256
#define AV_PFX _mm256
#define AV_EXP_NEG exp_neg8
/* two tiles use NK/2 keys per pass (16 registers) */
#define QK_NK(NT) ((NT) == 2 ? NK / 2 : NK)
#endif

#define AV_CAT2_(a, b) a##b
#define AV_CAT_(a, b) AV_CAT2_(a, b)
#define AV_OP(op) AV_CAT_(AV_PFX, op)

/* NT tiles (1 or 2) at once: with two, each broadcast K element feeds two
 * FMAs. st [NT][nb][R] */
AI void qk_n(const int NT, float *st, const float *qt, const float *k, int64_t ks, int nb,
             int64_t D, float scale) {
  const int nk = QK_NK(NT);
  const AV sc = AV_OP(_set1_ps)(scale);
  for (int j = 0; j < nb; j += nk) {
    /* A short last group repeats its last key; those results are dropped. */
    const float *kr[NK];
    for (int i = 0; i < nk; i++)
      kr[i] = k + (int64_t)(j + i < nb ? j + i : nb - 1) * ks;
    AV acc[2][NK];
    for (int u = 0; u < NT; u++)
      for (int i = 0; i < nk; i++)
        acc[u][i] = AV_OP(_setzero_ps)();
    for (int64_t d = 0; d < D; d++) {
      AV qv[2];
      for (int u = 0; u < NT; u++)
        qv[u] = AV_OP(_loadu_ps)(qt + (u * D + d) * R);
      for (int i = 0; i < nk; i++) {
        AV kv = AV_OP(_set1_ps)(kr[i][d]);
        for (int u = 0; u < NT; u++)
          acc[u][i] = AV_OP(_fmadd_ps)(kv, qv[u], acc[u][i]);
      }
    }
    int nv = nb - j < nk ? nb - j : nk;
    for (int u = 0; u < NT; u++)
      for (int i = 0; i < nv; i++)
        AV_OP(_storeu_ps)(st + (u * nb + j + i) * R, AV_OP(_mul_ps)(acc[u][i], sc));
  }
}

/* ntl (1 or 2) query tiles against nb keys. */
static void qk(float *st, const float *qt, int ntl, const float *k, int64_t ks, int nb, int64_t D,
               float scale) {
  if (ntl == 2)
    qk_n(2, st, qt, k, ks, nb, D, scale);
  else
    qk_n(1, st, qt, k, ks, nb, D, scale);
}

/* The online softmax over one block of scores st [nb][R] whose masked
 * entries are already -inf: st becomes e^(s - m_new), the running max m [R]
 * and sum l [R] move on, corr [R] = e^(m_old - m_new) rescales what the
 * earlier blocks accumulated. */
AI void softmax_update(float *st, int nb, float *m, float *l, float *corr) {
  AV bm = AV_OP(_set1_ps)(-INFINITY);
  for (int j = 0; j < nb; j++)
    bm = AV_OP(_max_ps)(bm, AV_OP(_loadu_ps)(st + j * R));
  AV mo = AV_OP(_loadu_ps)(m), mn = AV_OP(_max_ps)(mo, bm);
  AV c = AV_EXP_NEG(AV_OP(_sub_ps)(mo, mn)); /* first block: e^-inf = 0 */
  AV sum = AV_OP(_setzero_ps)();
  for (int j = 0; j < nb; j++) {
    AV p = AV_EXP_NEG(AV_OP(_sub_ps)(AV_OP(_loadu_ps)(st + j * R), mn));
    AV_OP(_storeu_ps)(st + j * R, p);
    sum = AV_OP(_add_ps)(sum, p);
  }
  AV_OP(_storeu_ps)(l, AV_OP(_fmadd_ps)(AV_OP(_loadu_ps)(l), c, sum));
  AV_OP(_storeu_ps)(m, mn);
  AV_OP(_storeu_ps)(corr, c);
}

#endif
