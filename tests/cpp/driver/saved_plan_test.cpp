// Saved plans (driver/saved_plan.h): the encoding round-trips any bytes, every truncation or
// damaged length is an error (never a crash or a partial plan), and weight fingerprints see
// every byte, shape, stride and dtype. Replay itself is tested end to end in
// tests/python/test_saved_plans.py (second process, refusals, corruption matrix, threads).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "verifuse/driver/saved_plan.h"

namespace verifuse::driver {
namespace {

SavedPlan samplePlan() {
  SavedPlan p;
  p.environment = "env;isa=avx2;odd bytes: 12:34\n";
  p.weights = {{"conv1.weight", "0123456789abcdef"}, {"bn1.bias", "fedcba9876543210"}};
  passes::ProofOutcome o;
  o.rule = "conv2d-bn-fold";
  o.verdict = "Proved";
  o.message = "proved; K=1..2";
  o.admitted = true;
  p.proofs[o.rule] = o;
  rules::InstanceCheck c;
  c.verdict = "Proved";
  c.maxErrorBound = 1.25e-7;
  c.maxError = 3.0000000000000004e-8;
  c.detail = "per-channel bound";
  c.layerVerdict = "skipped";
  c.layerSeconds = 0.5;
  p.instances.emplace_back("conv2d-bn-fold", c);
  p.tuned = true;
  kernels::TuningDecision d;
  d.chosen = "onednn";
  d.created = 1795636873;
  d.medianMs = {{"aten", 0.75}, {"onednn", 0.25}, {"gemm", -1.0}};
  d.failures = {{"gemm", "Unimplemented: no kernel"}};
  p.tunings[std::string("key\0with nul", 12)] = d;
  p.optimizedIr = "graph(%x: f32[1, 3]):\n  %0 = verifuse::conv(...)\n  return (%0)\n";
  return p;
}

TEST(SavedPlan, RoundTripsEveryField) {
  const SavedPlan p = samplePlan();
  auto back = SavedPlan::decode(p.encode());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->environment, p.environment);
  ASSERT_EQ(back->weights.size(), 2u);
  EXPECT_EQ(back->weights[1].name, "bn1.bias");
  EXPECT_EQ(back->weights[1].print, "fedcba9876543210");
  ASSERT_EQ(back->proofs.count("conv2d-bn-fold"), 1u);
  EXPECT_TRUE(back->proofs.at("conv2d-bn-fold").admitted);
  EXPECT_TRUE(back->proofs.at("conv2d-bn-fold").fromCache);  // a replayed verdict ran no solver
  ASSERT_EQ(back->instances.size(), 1u);
  EXPECT_EQ(back->instances[0].second.maxErrorBound, 1.25e-7);  // bit-exact doubles
  EXPECT_EQ(back->instances[0].second.maxError, 3.0000000000000004e-8);
  EXPECT_TRUE(back->tuned);
  const auto& d = back->tunings.at(std::string("key\0with nul", 12));
  EXPECT_EQ(d.chosen, "onednn");
  EXPECT_EQ(d.engine, kernels::Engine::kOneDnn);
  EXPECT_EQ(d.msOf("aten"), 0.75);
  EXPECT_EQ(d.failures.at("gemm"), "Unimplemented: no kernel");
  EXPECT_EQ(back->optimizedIr, p.optimizedIr);
  EXPECT_EQ(back->encode(), p.encode());
}

TEST(SavedPlan, EveryTruncationAndTrailingByteIsRefused) {
  const std::string bytes = samplePlan().encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(SavedPlan::decode(bytes.substr(0, n)).isOk()) << "prefix of " << n << " bytes decoded";
  }
  EXPECT_FALSE(SavedPlan::decode(bytes + "x").isOk());
}

TEST(SavedPlan, DamagedLengthsAndOtherFormatsAreRefused) {
  const std::string bytes = samplePlan().encode();
  // Every single-digit change: a changed length breaks the framing (refused); a changed digit
  // inside a value (a time, a double's last digit) still decodes to a complete plan, which the
  // replay's checks (environment, fingerprints, optimized IR) then judge. Never a crash.
  std::vector<bool> lengthDigit(bytes.size(), false);  // the framing's "<length>:" digits
  for (size_t pos = 0; pos < bytes.size();) {
    const size_t colon = bytes.find(':', pos);
    ASSERT_NE(colon, std::string::npos);
    for (size_t k = pos; k < colon; ++k) lengthDigit[k] = true;
    pos = colon + 1 + std::stoul(bytes.substr(pos, colon - pos));
  }
  int lengths = 0;
  for (size_t k = 0; k < bytes.size(); ++k) {
    if (bytes[k] < '0' || bytes[k] > '9') continue;
    std::string damaged = bytes;
    damaged[k] = damaged[k] == '9' ? '0' : static_cast<char>(damaged[k] + 1);
    auto r = SavedPlan::decode(damaged);
    if (lengthDigit[k]) {
      ++lengths;
      EXPECT_FALSE(r.isOk()) << "length digit at byte " << k << " changed, still decoded";
    } else if (r.isOk()) {
      EXPECT_TRUE(SavedPlan::decode(r->encode()).isOk());
    }
  }
  EXPECT_GT(lengths, 30);
  std::string older = bytes;
  older.replace(older.find("verifuse-plan-v1"), 16, "verifuse-plan-v0");
  auto r = SavedPlan::decode(older);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("verifuse-plan-v0"), std::string::npos) << r.status().toString();
  EXPECT_FALSE(SavedPlan::decode("").isOk());
  EXPECT_FALSE(SavedPlan::decode("99999999999999999999:x").isOk());
}

ir::ConstantTensor floats(const std::string& name, std::shared_ptr<std::vector<float>> data, std::vector<int64_t> sizes,
                          std::vector<int64_t> strides) {
  ir::ConstantTensor c;
  c.name = name;
  c.sizes = std::move(sizes);
  c.strides = std::move(strides);
  c.dtype = ir::DType::Float32;
  c.data = data->data();
  c.owner = data;
  c.ownerKind = ir::ConstantOwner::HostBuffer;
  return c;
}

TEST(SavedPlan, FingerprintsSeeEveryByteShapeStrideAndDtype) {
  auto data = std::make_shared<std::vector<float>>(4099);
  for (size_t k = 0; k < data->size(); ++k) (*data)[k] = static_cast<float>(k) * 0.5f;
  auto print = [&](std::vector<int64_t> sizes, std::vector<int64_t> strides, ir::DType dtype = ir::DType::Float32) {
    ir::Graph g;
    ir::ConstantTensor c = floats("w", data, std::move(sizes), std::move(strides));
    c.dtype = dtype;
    g.addConstant(std::move(c));
    auto p = fingerprintWeights(g, {0});
    EXPECT_TRUE(p.isOk()) << p.status().toString();
    return p.isOk() ? p->at(0).print : std::string();
  };
  const std::string base = print({4099}, {1});
  EXPECT_EQ(base.size(), 16u);
  EXPECT_EQ(print({4099}, {1}), base);  // deterministic
  for (size_t k : {size_t{0}, size_t{31}, size_t{4096}, size_t{4098}}) {  // lanes and the tail
    const float saved = (*data)[k];
    (*data)[k] += 1.0f;
    EXPECT_NE(print({4099}, {1}), base) << "element " << k;
    (*data)[k] = saved;
  }
  EXPECT_EQ(print({4099}, {1}), base);
  EXPECT_NE(print({1, 4099}, {4099, 1}), base);
  EXPECT_NE(print({2049}, {2}), print({2049}, {1}));
  EXPECT_NE(print({4099}, {1}, ir::DType::Int32), base);

  std::vector<WeightPrint> saved = {{"w", base}}, now = {{"w", print({1, 4099}, {4099, 1})}};
  Status s = checkWeights(saved, now);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("weight 'w' differs"), std::string::npos) << s.toString();
  EXPECT_TRUE(checkWeights(saved, saved).isOk());
  EXPECT_FALSE(checkWeights(saved, {}).isOk());
}

TEST(SavedPlan, AConstantWithoutDataCannotBeFingerprinted) {
  ir::Graph g;
  ir::ConstantTensor c;
  c.name = "parsed";
  c.sizes = {3};
  c.strides = {1};
  g.addConstant(std::move(c));
  EXPECT_FALSE(fingerprintWeights(g, {0}).isOk());
}

}  // namespace
}  // namespace verifuse::driver
