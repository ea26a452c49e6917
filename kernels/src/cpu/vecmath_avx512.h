// 16-lane AVX-512 versions of the vector math the own GEMM's epilogue spends its time in (GELU with
// erf, the BERT/ViT/Whisper/ConvNeXt activation): the same formulas and coefficients as
// vecmath_avx2.h, operation for operation, so the two agree except where vecmath_avx2.h uses the
// 12-bit reciprocal estimate (rcpps) and this file the 14-bit one (vrcp14ps), both refined the same
// way: results may differ in the last bit or two (the accuracy bounds of vecmath_test.cpp hold for
// both). Measured: the AVX2 version on both halves of a zmm made the GELU epilogue cost 20-25% of a
// BERT-size GEMM; this one halves that.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512DQ__)
#error "vecmath_avx512.h needs -mavx512f -mavx512dq (include it only from *_avx512.cpp files)"
#endif

#include <immintrin.h>

#include "cpu/vecmath_avx2.h"  // the coefficients

namespace verifuse::kernels::cpu::avx512 {

#define VF_VEC512_INLINE inline __attribute__((always_inline))

namespace detail {

namespace c = avx2::detail;

VF_VEC512_INLINE __m512 splat(float v) { return _mm512_set1_ps(v); }
VF_VEC512_INLINE __m512 absBits(__m512 x) { return _mm512_andnot_ps(_mm512_set1_ps(-0.0f), x); }
VF_VEC512_INLINE __m512 signBit(__m512 x) { return _mm512_and_ps(_mm512_set1_ps(-0.0f), x); }
template <int N>
VF_VEC512_INLINE __m512 horner(__m512 x, const float (&k)[N]) {
  __m512 r = _mm512_set1_ps(k[N - 1]);
  for (int i = N - 2; i >= 0; --i) r = _mm512_fmadd_ps(r, x, _mm512_set1_ps(k[i]));
  return r;
}

/// vecmath_avx2.h's toBf16Bits on 16 lanes: float -> bf16 bit patterns in the low 16 bits of each
/// lane, rounded to nearest even as torch does; NaN -> 0x7FC0.
VF_VEC512_INLINE __m512i toBf16Bits(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, _mm512_set1_epi32(0x7FC0));
}

/// vecmath_avx2.h's expClamped, the final p * 2^n by vscalefps (one rounding, as vecmath's two
/// normal powers of two: the same bits, checked over all 2^32 inputs; 11 instructions fewer).
VF_VEC512_INLINE __m512 expClamped(__m512 x) {
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, splat(c::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, splat(c::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, splat(c::kLn2Lo), r);
  __m512 p = horner(r, c::kExpP);
  p = _mm512_add_ps(splat(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(r, r), p, r));
  return _mm512_scalef_ps(p, n);
}

/// exp(x) for the attention row step's probabilities, which are rounded to bf16 next (x = score
/// minus its row's max, so x <= 0): one degree-4 polynomial on the reduced argument
/// (vecmath_fit.py's fit_exp_for_bf16, relative error 2.6e-6) and a one-constant reduction (ln 2's
/// float32 error times |n| <= 150 adds under 3e-7): within 2^-17 relative down to the denormals,
/// 2^9 times finer than the bf16 rounding that follows. 9 operations per 16 lanes against
/// expClamped's 15 with its clamps; the row step's exp was a third of bf16 attention outside its
/// matmuls. x <= -104 gives exp(-104)'s denormal or 0 (so -inf, a masked key, weighs nothing),
/// NaN gives NaN. Not for x > 88.
VF_VEC512_INLINE __m512 expForBf16Probabilities(__m512 x) {
  constexpr float kP[] = {0.9999992847442627f, 0.9999634027481079f, 0.5000435709953308f, 0.16790907084941864f,
                          0.0414586067199707f};
  x = _mm512_max_ps(splat(-104.0f), x);  // NaN passes through (vmaxps gives its second operand)
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, splat(c::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, splat(0.693147180559945309f), x);
  return _mm512_scalef_ps(horner(r, kP), n);
}

/// vecmath_avx2.h's erfcLarge (vrcp14ps for rcpps).
VF_VEC512_INLINE __m512 erfcLarge(__m512 a, __m512 sHi, __m512 sLo) {
  __m512 d = _mm512_add_ps(a, splat(2.0f));
  __m512 rd = _mm512_rcp14_ps(d);
  rd = _mm512_fmadd_ps(rd, _mm512_fnmadd_ps(d, rd, splat(1.0f)), rd);
  __m512 q = _mm512_mul_ps(_mm512_sub_ps(a, splat(2.0f)), rd);
  __m512 dh = _mm512_fmadd_ps(a, splat(2.0f), splat(1.0f));
  __m512 dl = _mm512_fmadd_ps(a, splat(2.0f), _mm512_sub_ps(splat(1.0f), dh));
  __m512 cx = _mm512_div_ps(horner(q, c::kErfcxP), dh);
  cx = _mm512_fnmadd_ps(cx, _mm512_mul_ps(dl, _mm512_rcp14_ps(dh)), cx);
  __m512 e = expClamped(_mm512_max_ps(splat(-104.0f), _mm512_sub_ps(_mm512_setzero_ps(), sHi)));
  e = _mm512_fnmadd_ps(e, sLo, e);
  return _mm512_mul_ps(e, cx);
}

}  // namespace detail

/// vecmath_avx2.h's geluErf: 0.5 x (1 + erf(x / sqrt 2)), torch's GELU (approximate="none").
VF_VEC512_INLINE __m512 geluErf(__m512 x) {
  using namespace detail;
  constexpr float kRsqrt2 = 0.70710678118654752f;
  __m512 xc = _mm512_min_ps(absBits(x), splat(c::kErfcxMax * 1.41421356f));
  __m512 ac = _mm512_mul_ps(xc, splat(kRsqrt2));
  __m512 x2 = _mm512_mul_ps(xc, xc);
  __m512 sHi = _mm512_mul_ps(x2, splat(0.5f));
  __m512 sLo = _mm512_mul_ps(_mm512_fmsub_ps(xc, xc, x2), splat(0.5f));
  __m512 t = _mm512_mul_ps(erfcLarge(ac, sHi, sLo), splat(0.5f));
  __m512 phi = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ),
                                    _mm512_sub_ps(splat(1.0f), t), t);
  __m512 z = _mm512_mul_ps(x, splat(kRsqrt2));
  __m512 az = absBits(z);
  __m512 erfSmall = _mm512_or_ps(_mm512_fmadd_ps(az, horner(_mm512_mul_ps(az, az), c::kErfHalfP), az), signBit(z));
  __m512 phiSmall = _mm512_mul_ps(splat(0.5f), _mm512_add_ps(splat(1.0f), erfSmall));
  phi = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(az, splat(c::kErfcSplit), _CMP_LE_OQ), phi, phiSmall);
  return _mm512_mul_ps(x, phi);
}

// ---- GELU for a bf16 result (the bf16 GEMM's epilogue) --------------------------------------------
//
// GELU(x) = x phi(x), phi = Phi (erf form) or 0.5 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (tanh
// form), with phi piecewise: one degree-5 polynomial in f = 2x - floor(2x) per half-unit interval
// of [-6, 6), fitted relative to phi by vecmath_fit.py (fit_gelu_pieces; |error of phi| <= 3.2e-8
// in double), an interval of zeros below (x in [-6.5, -6) and, clamped into it, everything
// smaller) and one of exact ones above (x >= 6). 2x and f are exact, so the float32 error is the
// fit's plus the rounding of the coefficients and of five multiply-adds: vecmath_test.cpp measures
// 1.1e-7 |x| and bounds it by 2.5e-7 |x|, under the 2^-8 relative rounding the result gets next.
// Below -6 the result is -0 where the exact GELU is above -6e-9 |x| (eager's float32 erf form
// gives 0 there too: 1 + erf cancels). About 18 operations per 16 lanes against the 35 of the
// rational-and-exp form this replaced (Abramowitz & Stegun 7.1.26 times exp(-a^2)): fc1 + GELU of
// BERT/ViT in bf16 is bound by the vector pipes the K loop's vdpbf16ps also needs, so each
// operation of the epilogue costs. Specials: NaN -> NaN (clamped into the zero interval: NaN * 0),
// -inf -> NaN (-inf * 0, as torch), +inf -> +inf, -0 -> -0.

namespace detail {
alignas(64) inline constexpr float kGeluErfPhiPieces[6][32] = {
    {0.0f, 9.852677562705026e-10f, 1.897763546310216e-08f, 2.8657399298026576e-07f,
     3.3973230983974645e-06f, 3.167023169226013e-05f, 0.00023262771719601005f, 0.0013498984044417739f,
     0.006209669169038534f, 0.022750137373805046f, 0.06680719554424286f, 0.15865524113178253f,
     0.3085375130176544f, 0.5f, 0.6914624571800232f, 0.8413447737693787f,
     0.933192789554596f, 0.9772498607635498f, 0.993790328502655f, 0.998650074005127f,
     0.9997673630714417f, 0.9999683499336243f, 0.9999966025352478f, 0.9999997019767761f,
     1.0f, 1.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, 3.128016956566171e-09f, 5.4668277016389766e-08f, 7.487287803087384e-07f,
     8.016300853341818e-06f, 6.698653305647895e-05f, 0.0004364406340755522f, 0.002215893007814884f,
     0.00876382365822792f, 0.026994993910193443f, 0.06475899368524551f, 0.12098664045333862f,
     0.17603358626365662f, 0.19947025179862976f, 0.17603111267089844f, 0.1209850087761879f,
     0.06475948542356491f, 0.026996033266186714f, 0.008764228783547878f, 0.002215821761637926f,
     0.00043626720434986055f, 6.688912253594026e-05f, 7.98605105956085e-06f, 7.424569616887311e-07f,
     5.374807798830261e-08f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, 3.565132633553958e-09f, 6.495387339100489e-08f, 8.691796438142774e-07f,
     8.715200237929821e-06f, 6.60992955090478e-05f, 0.00038062460953369737f, 0.0016623084666207433f,
     0.00548189040273428f, 0.013504238799214363f, 0.024282405152916908f, 0.03023044392466545f,
     0.021992266178131104f, 1.0149303307116497e-05f, -0.021985450759530067f, -0.030241748318076134f,
     -0.024292441084980965f, -0.013504321686923504f, -0.0054786172695457935f, -0.0016607606085017323f,
     -0.000380916811991483f, -6.660143117187545e-05f, -8.919844731281046e-06f, -9.180780580209102e-07f,
     -7.279016500660873e-08f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, 8.364110293257454e-09f, 1.0199904920682457e-07f, 9.859456895355834e-07f,
     7.537226792919682e-06f, 4.5209213567432016e-05f, 0.00020960984693374485f, 0.000737245543859899f,
     0.0018973532132804394f, 0.0033437805250287056f, 0.0033806024584919214f, 7.051342254271731e-05f,
     -0.005446150898933411f, -0.008352802135050297f, -0.005582515150308609f, -2.2247211745707318e-05f,
     0.003405847819522023f, 0.003403307171538472f, 0.0019221383845433593f, 0.0007336790440604091f,
     0.00020068007870577276f, 4.0424845792585984e-05f, 6.089350335969357e-06f, 6.924855711076816e-07f,
     5.983456219382788e-08f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, -3.668890968810956e-09f, -2.167974955114005e-08f, -5.288324889107798e-09f,
     1.193465664073301e-06f, 1.1859530786750838e-05f, 6.367795867845416e-05f, 0.000209587553399615f,
     0.00041038566268980503f, 0.00034533979487605393f, -0.0003890557854901999f, -0.0013981715310364962f,
     -0.0013765213079750538f, 7.259070116560906e-05f, 0.001421266351826489f, 0.0013108672574162483f,
     0.00031828429200686514f, -0.0003390703350305557f, -0.00038236574619077146f, -0.00019846358918584883f,
     -6.587597454199567e-05f, -1.5250348042172845e-05f, -2.556990693847183e-06f, -3.1692297852714546e-07f,
     -2.940408450058385e-08f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, 6.614606196109207e-09f, 6.772055627379814e-08f, 5.12455756052077e-07f,
     2.811375225064694e-06f, 1.0803262739500497e-05f, 2.691542249522172e-05f, 3.473412652965635e-05f,
     -1.2976474863535259e-05f, -0.0001312728418270126f, -0.0001848964748205617f, -7.1582066993869375e-06f,
     0.00025927330716513097f, 0.0002622700994834304f, -2.1255891624605283e-06f, -0.00018382818961981684f,
     -0.00013410426618065685f, -1.5482884919038042e-05f, 3.4383156162220985e-05f, 2.699242759263143e-05f,
     1.0803313671203796e-05f, 2.811377726175124e-06f, 5.124558697389148e-07f, 6.772052785208871e-08f,
     6.614582215291875e-09f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
};
alignas(64) inline constexpr float kGeluTanhPhiPieces[6][32] = {
    {0.0f, 1.368667852663652e-11f, 1.070352473320213e-09f, 4.576135026468364e-08f,
     1.1411026434871019e-06f, 1.7560412743478082e-05f, 0.00017605529865249991f, 0.0012124645290896297f,
     0.006033709738403559f, 0.022701159119606018f, 0.06695228070020676f, 0.15880799293518066f,
     0.3085719645023346f, 0.5f, 0.6914280652999878f, 0.8411920070648193f,
     0.9330477118492126f, 0.9772988557815552f, 0.993966281414032f, 0.998787522315979f,
     0.9998239278793335f, 0.9999824166297913f, 0.9999988675117493f, 0.9999999403953552f,
     1.0f, 1.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, 9.079975660242212e-11f, 4.851232748848133e-09f, 1.643468863221642e-07f,
     3.412375008338131e-06f, 4.416168303578161e-05f, 0.0003713291371241212f, 0.0021327321883291006f,
     0.008796765469014645f, 0.027199620380997658f, 0.06488782167434692f, 0.12088736146688461f,
     0.17594285309314728f, 0.19947022199630737f, 0.17594029009342194f, 0.12088577449321747f,
     0.0648883804678917f, 0.027200598269701004f, 0.008797149173915386f, 0.002132686320692301f,
     0.00037116443854756653f, 4.4056258047930896e-05f, 3.3792289286793675e-06f, 1.5865127522829425e-07f,
     4.319725910306715e-09f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, -1.258445153640153e-10f, 2.97126434567474e-09f, 2.0737574857321306e-07f,
     4.433634330780478e-06f, 5.070284169050865e-05f, 0.0003573488211259246f, 0.001679611043073237f,
     0.005575524643063545f, 0.013548601418733597f, 0.02417108789086342f, 0.03015820123255253f,
     0.022052768617868423f, 1.0639314496074803e-05f, -0.022045928984880447f, -0.030170829966664314f,
     -0.02418035827577114f, -0.013548146933317184f, -0.005572849418967962f, -0.001678139204159379f,
     -0.0003574433794710785f, -5.122091170051135e-05f, -4.6743725761189125e-06f, -2.5715738161125046e-07f,
     -8.08037992072741e-09f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, 1.2710875685328915e-09f, 3.21128155178485e-08f, 5.05861237343197e-07f,
     5.420620254881214e-06f, 4.065679240738973e-05f, 0.0002114330418407917f, 0.0007616550428792834f,
     0.0019140761578455567f, 0.0032958693336695433f, 0.0033444666769355536f, 0.00012351675832178444f,
     -0.005428049247711897f, -0.008395940065383911f, -0.005569834727793932f, 3.304273195681162e-05f,
     0.003373962128534913f, 0.003351871855556965f, 0.0019373692339286208f, 0.0007597196963615716f,
     0.00020294374553486705f, 3.544194987625815e-05f, 3.839593773591332e-06f, 2.447700637731032e-07f,
     8.722278899142566e-09f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, -1.5291332644551403e-09f, -2.7404762903415758e-08f, -1.9215977431485953e-07f,
     2.520459077004489e-07f, 1.1241637366765644e-05f, 6.912697426741943e-05f, 0.00021594797726720572f,
     0.00039462410495616496f, 0.000330976617988199f, -0.00036057669785805047f, -0.0013910569250583649f,
     -0.0014034481719136238f, 7.608025043737143e-05f, 0.0014483470004051924f, 0.0012940457090735435f,
     0.00029590073972940445f, -0.0003210401046089828f, -0.00037126641836948693f, -0.0002050606271950528f,
     -6.990190013311803e-05f, -1.4758620636712294e-05f, -1.8590261561257648e-06f, -1.337334367690346e-07f,
     -5.254679358301928e-09f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
    {0.0f, 1.3567771350864177e-09f, 3.222762146037894e-08f, 4.1023716335075733e-07f,
     2.9013140192546416e-06f, 1.1732030543498695e-05f, 2.716932249313686e-05f, 3.129794276901521e-05f,
     -1.3534770005207974e-05f, -0.00012392736971378326f, -0.00018707905837800354f, -1.4066768017073628e-05f,
     0.00026388780679553747f, 0.0002670290705282241f, -8.89518742042128e-06f, -0.0001863038050942123f,
     -0.0001267532934434712f, -1.583665653015487e-05f, 3.084040872636251e-05f, 2.72013021458406e-05f,
     1.1732072380254976e-05f, 2.9013156108703697e-06f, 4.102372201941762e-07f, 3.222765343480205e-08f,
     1.3567403867043026e-09f, 0.0f, 0.0f, 0.0f,
     0.0f, 0.0f, 0.0f, 0.0f},
};

/// x * phi(x) with \p pieces one of the tables above.
VF_VEC512_INLINE __m512 geluByPieces(__m512 x, const float (&pieces)[6][32]) {
  // max(t, -13) returns -13 for a NaN t (vmaxps gives its second operand then).
  const __m512 t = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(x, x), splat(-13.0f)), splat(12.0f));
  const __m512 whole = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, whole);
  const __m512i piece = _mm512_cvttps_epi32(_mm512_add_ps(whole, splat(13.0f)));  // 0 .. 25
  auto coefficient = [&](int k) __attribute__((always_inline)) {
    return _mm512_permutex2var_ps(_mm512_load_ps(pieces[k]), piece, _mm512_load_ps(pieces[k] + 16));
  };
  __m512 p = coefficient(5);
#pragma GCC unroll 5
  for (int k = 4; k >= 0; --k) p = _mm512_fmadd_ps(p, f, coefficient(k));
  return _mm512_mul_ps(x, p);
}

}  // namespace detail

/// GELU (erf, torch's approximate="none") for a result rounded to bf16 next.
VF_VEC512_INLINE __m512 geluErfForBf16(__m512 x) { return detail::geluByPieces(x, detail::kGeluErfPhiPieces); }

/// GELU (tanh approximation, GPT-2's "gelu_new") for a result rounded to bf16 next.
VF_VEC512_INLINE __m512 geluTanhForBf16(__m512 x) { return detail::geluByPieces(x, detail::kGeluTanhPhiPieces); }

}  // namespace verifuse::kernels::cpu::avx512
