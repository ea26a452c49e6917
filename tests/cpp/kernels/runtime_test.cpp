// Kernel runtime invariants: no per-call primitive creation, thread safety, error mapping, ISA.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "reference.h"
#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/ops.h"

namespace verifuse::kernels {
namespace {
using namespace testing;

struct ConvFixture {
  Dims src = {2, 16, 14, 14}, weight = {32, 16, 3, 3};
  std::vector<float> x = randomVec(numel(src), 1), w = randomVec(numel(weight), 2),
                     b = randomVec(32, 3);
  StatusOr<std::unique_ptr<Kernel>> make(Format fmt, ComputeType ct = ComputeType::kF32) {
    ConvParams p;
    p.srcDims = src;
    p.weightDims = weight;
    p.weights = w.data();
    p.bias = b.data();
    p.padL = {1, 1};
    p.postOps = {PostOp::relu()};
    p.srcFormat = fmt;
    p.dstFormat = fmt;
    p.compute = ct;
    return createConv(p);
  }
};

TEST(Runtime, IsaAndVersion) {
  EXPECT_FALSE(capabilities().onednnIsa.empty());
  EXPECT_NE(capabilities().onednnIsa, "unknown");
  EXPECT_EQ(onednnVersion().rfind("3.2.", 0), 0u) << onednnVersion();
  std::cout << "[ info ] oneDNN " << onednnVersion() << ", ISA " << capabilities().onednnIsa
            << ", bf16 " << capabilities().onednnNativeBf16() << "\n";
}

TEST(Runtime, PrimitivesAreCreatedOnceNotPerCall) {
  ConvFixture f;
  const int64_t before = primitiveCreationCount();
  VF_ASSERT_OK_AND_ASSIGN(auto k, f.make(Format::kPlain));
  const int64_t afterCreate = primitiveCreationCount();
  EXPECT_GE(afterCreate - before, 1);  // the conv (+ a weight reorder)
  std::vector<float> out(k->dstLayout().byteSize() / 4);
  for (int i = 0; i < 20; ++i) VF_ASSERT_OK(k->execute({f.x.data()}, out.data()));
  EXPECT_EQ(primitiveCreationCount(), afterCreate);
  // Same for a kernel with a per-call input conversion (bf16 staging) and a runtime-operand one.
  if (capabilities().onednnNativeBf16()) {
    VF_ASSERT_OK_AND_ASSIGN(auto kb, f.make(Format::kPlain, ComputeType::kBF16));
    const int64_t c = primitiveCreationCount();
    for (int i = 0; i < 5; ++i) VF_ASSERT_OK(kb->execute({f.x.data()}, out.data()));
    EXPECT_EQ(primitiveCreationCount(), c);
  }
}

TEST(Runtime, ConcurrentExecuteIsDeterministic) {
  ConvFixture f;
  std::vector<std::unique_ptr<Kernel>> kernels;
  for (Format fmt : {Format::kPlain, Format::kAny}) {
    VF_ASSERT_OK_AND_ASSIGN(auto k, f.make(fmt));
    kernels.push_back(std::move(k));
  }
  if (capabilities().onednnNativeBf16()) {
    VF_ASSERT_OK_AND_ASSIGN(auto k, f.make(Format::kPlain, ComputeType::kBF16));
    kernels.push_back(std::move(k));
  }
  for (const auto& k : kernels) {
    SCOPED_TRACE(k->implInfo() + " " + k->srcLayout().toString());
    std::vector<float> srcBuf = toLayoutBuffer(f.x, k->srcLayout());
    std::vector<float> expected(k->dstLayout().byteSize() / 4);
    VF_ASSERT_OK(k->execute({srcBuf.data()}, expected.data()));
    const int64_t created = primitiveCreationCount();
    constexpr int kThreads = 4, kIters = 25;
    std::vector<std::vector<float>> outs(kThreads, std::vector<float>(expected.size()));
    std::vector<int> failures(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kIters; ++i) {
          std::fill(outs[t].begin(), outs[t].end(), -1.f);
          if (!k->execute({srcBuf.data()}, outs[t].data()).isOk() || outs[t] != expected) {
            ++failures[t];
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
    EXPECT_EQ(primitiveCreationCount(), created);
  }
}

TEST(Runtime, ExecuteValidatesArguments) {
  ConvFixture f;
  VF_ASSERT_OK_AND_ASSIGN(auto k, f.make(Format::kPlain));
  std::vector<float> out(k->dstLayout().byteSize() / 4);
  Status s = k->execute({f.x.data(), f.x.data()}, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
  s = k->execute({f.x.data()}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
}

TEST(Runtime, TheCapabilityModelCapsOnednnToo) {
  // VERIFUSE_MAX_ISA alone (no ONEDNN_MAX_CPU_ISA) must reach oneDNN: the model applies it before
  // oneDNN's first use, so the two never disagree about the tier. In a fresh child process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto body = [] {
    setenv("VERIFUSE_MAX_ISA", "avx2", 1);
    unsetenv("ONEDNN_MAX_CPU_ISA");
    std::vector<float> w(8 * 8 * 9, 0.1f);
    ConvParams p;
    p.srcDims = {1, 8, 5, 5};
    p.weightDims = {8, 8, 3, 3};
    p.weights = w.data();
    auto conv = createConv(p);
    const Capabilities& c = capabilities();
    const bool ok = conv.isOk() && c.onednnIsa == "avx2" && c.tier() == cpu::Tier::kAvx2 &&
                    !c.onednnNativeBf16() && !c.onednnInt8WithoutSaturation() &&
                    conv.value()->implInfo().find("avx512") == std::string::npos;
    std::fprintf(stderr, "onednn=%s impl=%s\n", c.onednnIsa.c_str(), conv.isOk() ? conv.value()->implInfo().c_str() : "-");
    std::exit(ok ? 0 : 1);
  };
  EXPECT_EXIT(body(), ::testing::ExitedWithCode(0), "onednn=avx2 impl=");
}

TEST(Runtime, NoImplementationMapsToUnimplemented) {
  // bf16 compute on a CPU without avx512_core has no oneDNN v3.2 implementation: the factories
  // must say kUnimplemented (the caller falls back to ATen), not crash or report an internal
  // error. The ISA cap must be set before oneDNN's first ISA query, so this runs in a fresh
  // child process (death-test machinery, "threadsafe" style re-executes the binary).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto body = [] {
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    std::vector<float> w(8 * 8 * 9, 0.1f);
    ConvParams p;
    p.srcDims = {1, 8, 5, 5};
    p.weightDims = {8, 8, 3, 3};
    p.weights = w.data();
    p.compute = ComputeType::kBF16;
    auto conv = createConv(p);
    auto lin = createLinear({4, 8, 8, w.data(), nullptr, {}, ComputeType::kBF16});
    auto mm = createMatmul({Layout::contiguous({4, 8}), Layout::contiguous({8, 3}), {},
                            ComputeType::kBF16});
    p.compute = ComputeType::kF32;
    auto f32 = createConv(p);  // still fine on the capped ISA
    const bool ok = capabilities().onednnIsa == "avx2" && !capabilities().onednnNativeBf16() &&
                    conv.status().code() == StatusCode::kUnimplemented &&
                    lin.status().code() == StatusCode::kUnimplemented &&
                    mm.status().code() == StatusCode::kUnimplemented && f32.isOk();
    std::fprintf(stderr, "isa=%s conv=%s\n", capabilities().onednnIsa.c_str(), conv.status().toString().c_str());
    std::exit(ok ? 0 : 1);
  };
  EXPECT_EXIT(body(), ::testing::ExitedWithCode(0), "isa=avx2 conv=Unimplemented");
}

}  // namespace
}  // namespace verifuse::kernels
