// Int8 rules (issue 17): the quantize/dequantize chains of a PT2E-quantized graph become int8
// convolutions and linears (oneDNN's u8/s8 x s8 -> s32 kernels), with the integer semantics
// proved.
//
//   int8-conv-dequant          conv(dq(xq, sx, zx), dq_ch(Wq, sw, 0), b)  = qconv(xq, Wq, b) -> f32
//   int8-linear-dequant        addmm(b, dq(xq), permute(dq_ch(Wq)))        = qlinear(xq, Wq, b) -> f32
//   int8-relu-postop           relu(qconv f32)                             = qconv with the relu post-op
//   int8-clamp-postop          hardtanh/clamp(qconv f32, lo, hi), lo <= hi = qconv with the clip post-op (ReLU6)
//   int8-gelu-postop           gelu([view](qlinear f32))                   = [view](qlinear with the gelu post-op)
//   int8-requantize            q([view](qconv f32), sy, zy, qmin, qmax)    = [view](qconv -> u8/s8) (oneDNN's dst
//                                                                            scale, zero point, saturation)
//   int8-relu-across-requant   q(relu(dq(xq, s, z)), s, z)                 = clamp_min(xq, z)
//   int8-maxpool-codes         q(max_pool2d(dq(x, s, z)), s, z)            = verifuse::qmax_pool(x) on the codes
//   int8-requantize-cat        q(cat([qconv f32, ...]))                     = cat([qconv -> u8/s8, ...]) (in place)
//   int8-requantize-maxpool    q(max_pool2d(qconv f32))                    = qmax_pool(qconv -> u8/s8)
//   int8-select-codes          q(cat([dq(a, s, z), ...]), s, z)            = cat([a, ...]) on the codes (and view)
//   int8-residual-sum          q([relu](qconv f32 + dq(r, sr, zr)))        = qconv -> u8/s8 with the sum post-op
//                                                                            (scale sr, zero point zr) [and relu]
//   int8-int-mm                _int_mm(xq, permute(Wq, [1, 0]))             = verifuse::int_mm(xq, Wq) (s32, torchao's dynamic int8)
//   int8-weight-only-mm        mm(x, permute(Wq, [1, 0]).to(f32))          = verifuse::int8_weight_mm(x, Wq) (torchao's weight-only int8)
//   int4-weight-only-mm        [add]mm(x, torchao's dequantized int4 W^T)    = verifuse::int4_weight_mm(x, Q, S, Z, b, g) (torchao's int4, groups of g)
//   int8-quantize-kernel       q(x f32) left over                          = verifuse::quantize (one C++ pass)
//
// The integer semantics the obligations state (torch/ao/quantization/fx/_decomposed.py):
//   dequantize_per_tensor(x, s, z)      = (x - z) * s
//   dequantize_per_channel(W, s, z)[o]  = (W[o] - z[o]) * s[o]
//   quantize_per_tensor(y, s, z, lo, hi) = clamp(round(y * (1/s)) + z, lo, hi), round = half to even
// and oneDNN's int8 convolution / matmul (kernels/int8.h):
//   acc = sum_k W[o,k] * (x_k - zx)  (s32);  y = sx * sw[o] * acc + b[o];  relu post-op on y;
//   dst = saturate_dtype(nearbyint(y * (1/sy)) + zy)   (nearbyint: half to even, the default mode)
// Rounding is a fresh Int `n` with |t - n| <= 1/2 and, on a tie, n even (n = 2h, h a fresh Int).
// Conv/linear are proved per output element with K = 3 explicit products (the identity is
// distributivity, so the size does not matter); the requantization is split into the real-valued
// scaled result t = y * (1/s) and the integer code of t (linear integer
// arithmetic, every t), which compose: equal t, equal code.
//
// Guards: activation scale finite and > 0, zero point within [qmin, qmax]; weights an s8 constant
// with finite positive per-channel scales, all weight zero points 0, axis 0, range [-128, 127];
// the requantization range the whole dtype (oneDNN saturates to the dtype; a reduced range is
// refused). Constants parsed from text carry no data: their values are not checked there (golden
// tests); the lowering always gives the real tensors.
//
// Each rule's pattern, guards, rewrite, obligation and mutants are in one place, with its
// declaration: quantized_folds.cpp (int8-conv-dequant, int8-linear-dequant), quantized_postops.cpp
// (the post-ops, int8-relu-across-requant), quantized_requantize.cpp (the requantizations and the
// ops on codes), quantized_kernels.cpp (int8-int-mm, int8-quantize-kernel); what they share is
// quantized_common.{h,cpp}. This file lists them in the order they are tried.
#include <vector>

#include "rules/families.h"
#include "rules/quantized_common.h"

namespace verifuse::rules::families {

std::vector<RuleDeclaration> quantizedInt8() {
  std::vector<RuleDeclaration> rules;
  rules.push_back(int8ConvDequant());
  rules.push_back(int8LinearDequant());
  rules.push_back(int8ReluPostOp());
  rules.push_back(int8ClampPostOp());
  rules.push_back(int8GeluPostOp());
  rules.push_back(int8Requantize());
  rules.push_back(int8ReluAcrossRequant());
  rules.push_back(int8MaxPoolCodes());
  rules.push_back(int8RequantizeCat());
  rules.push_back(int8RequantizeMaxPool());
  rules.push_back(int8SelectCodes());
  rules.push_back(int8ResidualSum());
  rules.push_back(int8IntMm());
  rules.push_back(int8WeightOnlyMm());
  rules.push_back(int4WeightOnlyMm());
  rules.push_back(int8QuantizeKernel());
  return rules;
}

}  // namespace verifuse::rules::families
