// Layout value semantics and reorders between plain, channels-last, blocked and bf16 layouts.
#include <gtest/gtest.h>

#include "reference.h"
#include "verifuse/kernels/layout.h"
#include "verifuse/kernels/ops.h"

namespace verifuse::kernels {
namespace {
using namespace testing;

TEST(Layout, PlainFactories) {
  Layout c = Layout::contiguous({2, 3, 4, 5});
  EXPECT_TRUE(c.isPlain());
  EXPECT_TRUE(c.isContiguous());
  EXPECT_EQ(c.strides(), (Dims{60, 20, 5, 1}));
  EXPECT_EQ(c.byteSize(), 120u * 4);
  EXPECT_EQ(c.numElements(), 120);
  EXPECT_EQ(c.dtype(), DataType::kF32);
  EXPECT_EQ(c, Layout::plain({2, 3, 4, 5}, {60, 20, 5, 1}));
  EXPECT_EQ(c, Layout::plain({2, 3, 4, 5}));

  Layout cl = Layout::channelsLast({2, 3, 4, 5});
  EXPECT_TRUE(cl.isPlain());
  EXPECT_FALSE(cl.isContiguous());
  EXPECT_EQ(cl.strides(), (Dims{60, 1, 15, 3}));
  EXPECT_NE(c, cl);
  EXPECT_EQ(cl, Layout::plain({2, 3, 4, 5}, {60, 1, 15, 3}));

  Layout bf = Layout::contiguous({2, 3, 4, 5}, DataType::kBF16);
  EXPECT_EQ(bf.byteSize(), 120u * 2);
  EXPECT_NE(bf, c);

  Layout t = Layout::plain({4, 8}, {1, 4});  // a transposed view
  EXPECT_TRUE(t.isPlain());
  EXPECT_FALSE(t.isContiguous());

  Layout e;
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.byteSize(), 0u);
  EXPECT_EQ(e, Layout());
  EXPECT_NE(e, c);
  EXPECT_EQ(c.toString(), "f32[2,3,4,5] strides=[60,20,5,1]");
}

/// A blocked layout as a primitive would choose it (conv with format any over 16+ channels).
Layout blockedLayoutFor(const Dims& src) {
  std::vector<float> w(static_cast<size_t>(src[1] * src[1] * 9), 0.01f);
  ConvParams p;
  p.srcDims = src;
  p.weightDims = {src[1], src[1], 3, 3};
  p.weights = w.data();
  p.padL = {1, 1};
  p.srcFormat = Format::kAny;
  auto k = createConv(p);
  EXPECT_TRUE(k.isOk()) << k.status().toString();
  return (*k)->srcLayout();
}

TEST(Layout, PrimitiveChosenLayoutRoundTrips) {
  const Dims d = {2, 19, 5, 6};  // 19 channels: blocked layouts pad to a block multiple
  Layout blocked = blockedLayoutFor(d);
  ASSERT_EQ(blocked.dims(), d);
  SCOPED_TRACE(blocked.toString());
  EXPECT_GE(blocked.byteSize(), size_t(numel(d)) * 4);
  auto x = randomVec(numel(d), 1);
  auto inBlocked = toLayoutBuffer(x, blocked);
  EXPECT_EQ(fromLayoutBuffer(inBlocked, blocked), x);  // bit-exact round trip
}

TEST(Layout, ReorderPlainChannelsLastBf16) {
  const Dims d = {2, 3, 4, 5};
  auto x = randomVec(numel(d), 2);
  // NCHW -> NHWC matches a manual permutation.
  VF_ASSERT_OK_AND_ASSIGN(auto toNhwc, createReorder(Layout::contiguous(d), Layout::channelsLast(d)));
  auto nhwc = runDense(*toNhwc, {x.data()});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 5; ++w)
          ASSERT_EQ(nhwc[((n * 4 + h) * 5 + w) * 3 + c], x[((n * 3 + c) * 4 + h) * 5 + w]);
  // f32 -> bf16 -> f32 equals round-to-nearest-even bf16.
  VF_ASSERT_OK_AND_ASSIGN(auto toBf, createReorder(Layout::contiguous(d), Layout::contiguous(d, DataType::kBF16)));
  VF_ASSERT_OK_AND_ASSIGN(auto fromBf, createReorder(Layout::contiguous(d, DataType::kBF16), Layout::contiguous(d)));
  std::vector<uint16_t> half(static_cast<size_t>(numel(d)));
  std::vector<float> back(static_cast<size_t>(numel(d)));
  VF_ASSERT_OK(toBf->execute({x.data()}, half.data()));
  VF_ASSERT_OK(fromBf->execute({half.data()}, back.data()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(back[i], roundBf16(x[i])) << i;
  // Mismatched dims are rejected as an invalid argument, not a crash.
  auto bad = createReorder(Layout::contiguous({2, 3}), Layout::contiguous({3, 2}));
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace verifuse::kernels
