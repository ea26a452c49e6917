// Linear (inner product, weights prepacked or read in place) and batched broadcasting matmul
// against reference loops.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "reference.h"
#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/ops.h"

namespace verifuse::kernels {
namespace {
using namespace testing;

std::vector<float> refLinear(const std::vector<float>& x, const std::vector<float>& w,
                             const float* b, int64_t m, int64_t k, int64_t n) {
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = b ? b[j] : 0.0;
      for (int64_t t = 0; t < k; ++t) acc += double(x[i * k + t]) * w[j * k + t];
      y[i * n + j] = static_cast<float>(acc);
    }
  return y;
}

struct LinearCase {
  std::string name;
  int64_t m, k, n;
  bool bias;
  std::vector<PostOp> ops;
};

/// Bytes of this process's mappings that carry the huge-page advice (VmFlags "hg",
/// /proc/self/smaps); -1 when unreadable.
long long hugePageAdvisedBytes() {
  std::ifstream f("/proc/self/smaps");
  if (!f) return -1;
  std::string line;
  long long total = 0, sizeKb = 0;
  while (std::getline(f, line)) {
    long long kb = 0;
    if (std::sscanf(line.c_str(), "Size: %lld kB", &kb) == 1) sizeKb = kb;
    if (line.rfind("VmFlags:", 0) == 0 && (line + " ").find(" hg ") != std::string::npos) total += sizeKb * 1024;
  }
  return total;
}

// Weights are packed into memory advised for transparent huge pages (packConstant,
// cpu::allocateWeightMemory): the linear streams them on every call. Checked on the advice (the
// mappings' VmFlags), not on the pages the kernel then grants, which depends on its free memory.
TEST(LinearWeightsMemory, PackedWeightsAreAdvisedHugePages) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "no transparent huge pages";
  const int64_t m = 4, k = 1024, n = 4096;  // 16 MiB of float32 weights
  auto w = randomVec(n * k, 2);
  const long long before = hugePageAdvisedBytes();
  ASSERT_GE(before, 0);
  LinearParams p{m, k, n, w.data(), nullptr, {}};
  VF_ASSERT_OK_AND_ASSIGN(auto kernel, createLinear(p));
  ASSERT_FALSE(kernel->borrowsWeights());
  const long long grown = hugePageAdvisedBytes() - before;
  EXPECT_GE(grown, 14ll << 20) << "16 MiB of packed weights, " << grown << " bytes more advised";
  auto x = randomVec(m * k, 1);  // and the kernel still computes from them
  std::vector<float> y(static_cast<size_t>(m * n));
  const void* in[] = {x.data()};
  ASSERT_TRUE(kernel->execute(in, y.data()).isOk());
  auto want = refLinear(x, w, nullptr, m, k, n);
  for (size_t i = 0; i < y.size(); i += 997) EXPECT_NEAR(y[i], want[i], 1e-3f) << i;
}

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, MatchesReference) {
  const LinearCase& c = GetParam();
  auto x = randomVec(c.m * c.k, 1);
  auto w = randomVec(c.n * c.k, 2);
  auto b = randomVec(c.n, 3);
  std::vector<std::vector<float>> operands;
  for (const PostOp& op : c.ops) {
    if (op.kind == PostOp::Kind::kBinary) operands.push_back(randomVec(numel(op.binaryDims), 7));
  }
  auto prior = randomVec(c.m * c.n, 9);
  auto want = refLinear(x, w, c.bias ? b.data() : nullptr, c.m, c.k, c.n);
  refPostOps(c.ops, {c.m, c.n}, want, prior, operands);
  std::vector<const float*> in{x.data()};
  for (auto& o : operands) in.push_back(o.data());
  for (bool borrow : {false, true}) {  // packed weights, and the caller's weights read in place
    LinearParams p{c.m, c.k, c.n, w.data(), c.bias ? b.data() : nullptr, c.ops};
    p.borrowWeights = borrow;
    VF_ASSERT_OK_AND_ASSIGN(auto k, createLinear(p));
    EXPECT_EQ(k->borrowsWeights(), borrow) << k->implInfo();
    auto got = runDense(*k, in, &prior);
    expectClose(got, want, 1e-4f, 1e-4f, c.name + (borrow ? " borrowed " : " packed ") + k->implInfo());
  }
}

TEST(LinearBorrowedWeights, AreReadInPlaceNotCopied) {
  const int64_t m = 4, k = 32, n = 16;
  auto x = randomVec(m * k, 1);
  auto w = randomVec(n * k, 2);
  LinearParams p{m, k, n, w.data(), nullptr, {}};
  p.borrowWeights = true;
  VF_ASSERT_OK_AND_ASSIGN(auto kernel, createLinear(p));
  ASSERT_TRUE(kernel->borrowsWeights()) << kernel->implInfo();
  std::vector<const float*> in{x.data()};
  expectClose(runDense(*kernel, in, nullptr), refLinear(x, w, nullptr, m, k, n), 1e-4f, 1e-4f, "before");
  for (float& v : w) v *= -2.0f;  // the kernel sees the caller's buffer, not a copy made at creation
  expectClose(runDense(*kernel, in, nullptr), refLinear(x, w, nullptr, m, k, n), 1e-4f, 1e-4f, "after");
}

TEST(LinearBorrowedWeights, Bf16IsAlwaysPacked) {
  VF_SKIP_UNLESS(capabilities().onednnNativeBf16(), "oneDNN on native bf16 (below it oneDNN has no bf16 inner product)");
  auto w = randomVec(8 * 8, 2);
  LinearParams p{4, 8, 8, w.data(), nullptr, {}, ComputeType::kBF16};
  p.borrowWeights = true;
  VF_ASSERT_OK_AND_ASSIGN(auto kernel, createLinear(p));
  EXPECT_FALSE(kernel->borrowsWeights());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LinearTest,
    ::testing::Values(LinearCase{"bias", 7, 33, 19, true, {}},
                      LinearCase{"nobias", 1, 64, 10, false, {}},
                      LinearCase{"gelu_erf", 16, 48, 24, true, {PostOp::geluErf()}},
                      LinearCase{"silu", 5, 20, 30, true, {PostOp::silu()}},
                      LinearCase{"residual_sum", 8, 16, 16, true, {PostOp::sum()}},
                      LinearCase{"binary_add_full_then_relu", 6, 12, 9, false,
                                 {PostOp::binary(BinaryAlg::kAdd, {6, 9}), PostOp::relu()}},
                      LinearCase{"binary_mul_row", 6, 12, 9, true,
                                 {PostOp::binary(BinaryAlg::kMul, {1, 9})}}),
    [](const auto& info) { return info.param.name; });

/// Reference batched matmul with broadcasting; a and b given dense with their own dims.
std::vector<float> refMatmul(const std::vector<float>& a, Dims ad, const std::vector<float>& b,
                             Dims bd, Dims* odOut) {
  const size_t r = std::max(ad.size(), bd.size());
  while (ad.size() < r) ad.insert(ad.begin(), 1);
  while (bd.size() < r) bd.insert(bd.begin(), 1);
  Dims od(r);
  for (size_t i = 0; i + 2 < r; ++i) od[i] = std::max(ad[i], bd[i]);
  const int64_t M = ad[r - 2], K = ad[r - 1], N = bd[r - 1];
  od[r - 2] = M;
  od[r - 1] = N;
  Dims batch(od.begin(), od.end() - 2), abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2);
  std::vector<float> y(static_cast<size_t>(numel(od)));
  for (int64_t bi = 0; bi < numel(batch); ++bi) {
    int64_t ao = broadcastIndex(batch, abatch, bi) * M * K, bo = broadcastIndex(batch, bbatch, bi) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t t = 0; t < K; ++t) acc += double(a[ao + i * K + t]) * b[bo + t * N + j];
        y[bi * M * N + i * N + j] = static_cast<float>(acc);
      }
  }
  *odOut = od;
  return y;
}

TEST(Matmul, BatchedBroadcast) {
  Dims ad = {2, 1, 4, 8}, bd = {3, 8, 5};
  auto a = randomVec(numel(ad), 1), b = randomVec(numel(bd), 2);
  MatmulParams p{Layout::contiguous(ad), Layout::contiguous(bd), {}};
  VF_ASSERT_OK_AND_ASSIGN(auto k, createMatmul(p));
  Dims od;
  auto want = refMatmul(a, ad, b, bd, &od);
  EXPECT_EQ(k->outputLayout().dims(), od);
  expectClose(runDense(*k, {a.data(), b.data()}), want, 1e-4f, 1e-4f, k->implInfo());
}

TEST(Matmul, TransposedOperandViaStrides) {
  // q[B,H,T,D] x k^T where k is stored [B,H,T,D]: pass k as a strided [B,H,D,T] view.
  const int64_t B = 2, H = 3, T = 5, D = 8;
  auto q = randomVec(B * H * T * D, 1), kv = randomVec(B * H * T * D, 2);
  Layout kT = Layout::plain({B, H, D, T}, {H * T * D, T * D, 1, D});
  MatmulParams p{Layout::contiguous({B, H, T, D}), kT,
                 {PostOp::linear(1.f / std::sqrt(float(D))),
                  PostOp::binary(BinaryAlg::kAdd, {B, 1, 1, T})}};  // scale then additive mask
  VF_ASSERT_OK_AND_ASSIGN(auto k, createMatmul(p));
  std::vector<float> kTdense(kv.size());
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) kTdense[bh * D * T + d * T + t] = kv[bh * T * D + t * D + d];
  auto mask = randomVec(B * T, 3, -5.f, 0.f);
  Dims od;
  auto want = refMatmul(q, {B, H, T, D}, kTdense, {B, H, D, T}, &od);
  refPostOps(p.postOps, od, want, {}, {mask});
  expectClose(runDense(*k, {q.data(), kv.data(), mask.data()}), want, 1e-4f, 1e-4f, k->implInfo());
}

TEST(Matmul, InnerDimMismatchIsInvalid) {
  auto k = createMatmul({Layout::contiguous({4, 8}), Layout::contiguous({7, 5}), {}});
  ASSERT_FALSE(k.isOk());
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
}

TEST(Bf16, LinearAndMatmul) {
  VF_SKIP_UNLESS(capabilities().onednnNativeBf16(), "oneDNN on native bf16 (avx512_bf16 or AMX)");
  const int64_t m = 16, kk = 64, n = 32;
  auto x = randomVec(m * kk, 1), w = randomVec(n * kk, 2), b = randomVec(n, 3);
  LinearParams lp{m, kk, n, w.data(), b.data(), {PostOp::geluTanh()}, ComputeType::kBF16};
  VF_ASSERT_OK_AND_ASSIGN(auto lin, createLinear(lp));
  std::vector<float> xr(x), wr(w);
  for (float& v : xr) v = roundBf16(v);
  for (float& v : wr) v = roundBf16(v);
  auto want = refLinear(xr, wr, b.data(), m, kk, n);
  for (float& v : want) v = refActivation(Activation::kGeluTanh, v);
  expectClose(runDense(*lin, {x.data()}), want, 1e-3f, 1e-3f, "bf16 linear " + lin->implInfo());
  EXPECT_TRUE(isNativeBf16Impl(lin->implInfo())) << lin->implInfo();

  Dims ad = {2, 16, 64}, bd = {2, 64, 24};
  auto a = randomVec(numel(ad), 4), bm = randomVec(numel(bd), 5);
  MatmulParams mp{Layout::contiguous(ad), Layout::contiguous(bd), {}, ComputeType::kBF16};
  VF_ASSERT_OK_AND_ASSIGN(auto mm, createMatmul(mp));
  std::vector<float> ar(a), br(bm);
  for (float& v : ar) v = roundBf16(v);
  for (float& v : br) v = roundBf16(v);
  Dims od;
  auto wantM = refMatmul(ar, ad, br, bd, &od);
  expectClose(runDense(*mm, {a.data(), bm.data()}), wantM, 1e-3f, 1e-3f, "bf16 matmul " + mm->implInfo());
  EXPECT_TRUE(isNativeBf16Impl(mm->implInfo())) << mm->implInfo();
}

}  // namespace
}  // namespace verifuse::kernels
