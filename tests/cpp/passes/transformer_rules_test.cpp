// The transformer rules (canonicalize-addmm-kn, the activation recognitions, attention-to-sdpa,
// qkv-concat, remove-dense-clone) beyond their golden cases: the IR they produce on constants
// with data (views share the buffer, the concatenation is exact), the instance check of a
// concatenation, near misses with their reasons, the planted transformer bug, and the graph edits
// they rely on (ir/graph_edit.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "verifuse/ir/graph_edit.h"
#include "verifuse/passes/pipeline.h"
#include "verifuse/rules/rules.h"
#include "verifuse/verify/catalog.h"

namespace fs = std::filesystem;

namespace verifuse::passes {
namespace {

using ir::Arg;
using ir::Graph;

std::string readFile(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Graph parse(const std::string& text) {
  auto g = ir::parseGraph(text);
  EXPECT_TRUE(g.isOk()) << g.status().toString();
  return std::move(g).value();
}

Graph golden(const std::string& name) {
  return parse(readFile(fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules" / name));
}

ir::ConstantId constantNamed(const Graph& g, const std::string& name) {
  for (size_t k = 0; k < g.constants().size(); ++k) {
    if (g.constants()[k].name == name) return static_cast<ir::ConstantId>(k);
  }
  return -1;
}

/// Gives the parsed constant \p name data (row-major, a host buffer of T): element(i) for element i.
template <typename T, typename Element>
std::shared_ptr<std::vector<T>> attachBuffer(Graph& g, const std::string& name, Element element) {
  ir::ConstantTensor& c = g.mutableConstants().at(static_cast<size_t>(constantNamed(g, name)));
  auto buffer = std::make_shared<std::vector<T>>(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < buffer->size(); ++i) (*buffer)[i] = element(i);
  c.data = buffer->data();
  c.owner = buffer;
  c.ownerKind = ir::ConstantOwner::HostBuffer;
  return buffer;
}

/// Float32 data: value(i) for element i.
std::shared_ptr<std::vector<float>> attach(Graph& g, const std::string& name, float (*value)(size_t)) {
  return attachBuffer<float>(g, name, value);
}

/// The fusion record of \p rule (the last one), or null.
const rules::FusionRecord* recordOf(const std::vector<rules::FusionRecord>& fusions, const std::string& rule) {
  const rules::FusionRecord* rec = nullptr;
  for (const auto& f : fusions) {
    if (f.rule == rule) rec = &f;
  }
  return rec;
}

float wave(size_t i) { return std::sin(0.7f * static_cast<float>(i) + 0.3f); }
float ramp(size_t i) { return 0.25f * static_cast<float>(i) - 1.0f; }

PipelineOptions admitted(VerifyLevel level = VerifyLevel::kInstances) {
  PipelineOptions o;
  o.verify = level;
  o.proveRule = [](const rules::Rule&) {
    ProofOutcome out;
    out.verdict = "Proved";
    out.admitted = true;
    return out;
  };
  o.validateInstance = validateFoldInstance;
  return o;
}

ProofOutcome proveWithZ3(const rules::Rule& rule) {
  verify::ProveAllOptions options;
  options.maxK = 2;
  options.checkAxioms = false;
  const verify::RuleResult r = verify::proveRule(rule.proof(), options);
  ProofOutcome out;
  out.verdict = verify::verdictKindName(r.verdict.kind);
  out.message = r.verdict.summary() + " " + r.verdict.counterexample.toString();
  out.admitted = r.ok();
  return out;
}

const ir::Node* liveOp(const Graph& g, const std::string& op) {
  for (const ir::Node& n : g.nodes()) {
    if (!n.erased && n.op == op) return &n;
  }
  return nullptr;
}

std::vector<std::string> nearMisses(const PipelineResult& r, const std::string& rule) {
  std::vector<std::string> out;
  for (const NearMiss& m : r.nearMisses) {
    if (m.rule == rule) out.push_back(m.reason);
  }
  return out;
}

bool anyContains(const std::vector<std::string>& texts, const std::string& part) {
  return std::any_of(texts.begin(), texts.end(), [&](const std::string& t) { return t.find(part) != std::string::npos; });
}

// ---- graph edits ----------------------------------------------------------------------------------

TEST(GraphEditTest, ConstantViewSharesTheBufferAndChecksItsExtent) {
  Graph g = parse("graph(%x : Tensor[2, 3]) {\n  return (%x)\n}\nconstants {\n  $w : f32[3, 4]\n}\n");
  auto buffer = attach(g, "w", ramp);
  auto view = ir::addConstantView(g, 0, {4, 3}, {1, 4}, "_t");
  ASSERT_TRUE(view.isOk()) << view.status().toString();
  const ir::ConstantTensor& v = g.constants()[static_cast<size_t>(*view)];
  EXPECT_EQ(v.name, "w_t");
  EXPECT_EQ(v.sizes, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(v.strides, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(v.data, buffer->data());
  EXPECT_EQ(v.owner, g.constants()[0].owner);
  EXPECT_EQ(v.ownerKind, ir::ConstantOwner::HostBuffer);
  EXPECT_FALSE(v.isContiguous());
  // The same view again is the same constant; a view past the buffer is refused.
  EXPECT_EQ(*ir::addConstantView(g, 0, {4, 3}, {1, 4}, "_t"), *view);
  EXPECT_FALSE(ir::addConstantView(g, 0, {4, 4}, {1, 4}, "_big").isOk());
  EXPECT_FALSE(ir::addConstantView(g, 7, {4, 3}, {1, 4}, "_t").isOk());
}

TEST(GraphEditTest, FreeSlotsAndExtraOutputsKeepTheGraphValid) {
  Graph g = parse(R"(graph(%x : Tensor[2, 3]) {
  %0 : Tensor[3, 2] = aten::permute(%x, [1, 0])
  %1 : Tensor[2, 3] = aten::relu(%x)
  %2 : Tensor[2, 3] = aten::neg(%1)
  return (%2)
}
)");
  EXPECT_TRUE(ir::isFreeSlot(g, 0));   // dead: nothing reads the permute
  EXPECT_FALSE(ir::isFreeSlot(g, 1));  // read by the neg
  EXPECT_EQ(ir::findFreeSlot(g, -1, 2), 0);
  EXPECT_EQ(ir::findFreeSlot(g, 0, 2), -1);
  auto v = ir::placeInSlot(g, 0, "aten::sigmoid", "", {Arg::value(g.inputs()[0])}, ir::ValueType::Tensor);
  ASSERT_TRUE(v.isOk());
  EXPECT_EQ(g.node(0).op, "aten::sigmoid");
  EXPECT_FALSE(g.value(*v).hasShape);
  EXPECT_FALSE(ir::placeInSlot(g, 1, "aten::sigmoid", "", {}, ir::ValueType::Tensor).isOk());
  const ir::ValueId extra = ir::addNodeOutput(g, 2, ir::ValueType::Tensor);
  EXPECT_EQ(g.value(extra).producer, 2);
  EXPECT_EQ(g.value(extra).outputIndex, 1);
  EXPECT_EQ(g.nodes().size(), 3u);
  EXPECT_TRUE(ir::verifyGraph(g).isOk()) << ir::verifyGraph(g).toString();
}

// ---- canonicalize-addmm-kn: GPT-2's Conv1D -----------------------------------------------------------

const char* kConv1d = R"(graph(%x : Tensor[2, 3]) {
  %0 : Tensor[2, 4] = aten::addmm($b, %x, $w, 1, 1)
  return (%0)
}
constants {
  $b : f32[4]
  $w : f32[3, 4]
}
)";

TEST(AddmmKnTest, LinearReadsATransposedViewOfTheStoredWeight) {
  Graph g = parse(kConv1d);
  auto w = attach(g, "w", wave);
  attach(g, "b", ramp);
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->rewrites["canonicalize-addmm-kn"], 1);
  const ir::Node* lin = liveOp(g, rules::kLinearOp);
  ASSERT_NE(lin, nullptr);
  const ir::ConstantTensor& wt = g.constants()[static_cast<size_t>(lin->args[1].i)];
  EXPECT_EQ(wt.sizes, (std::vector<int64_t>{4, 3}));   // [N, K]
  EXPECT_EQ(wt.strides, (std::vector<int64_t>{1, 4}));  // W's strides swapped
  EXPECT_EQ(wt.data, w->data());                        // no copy
  EXPECT_EQ(g.constants()[static_cast<size_t>(lin->args[2].i)].name, "b");
  // linear(x, Wt)[m, n] = sum_k x[m, k] * Wt[n, k] reads W[k, n]: the addmm's product.
  const float* d = static_cast<const float*>(wt.data);
  for (int64_t n = 0; n < 4; ++n) {
    for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(d[n * wt.strides[0] + k * wt.strides[1]], (*w)[static_cast<size_t>(k * 4 + n)]);
  }
}

TEST(AddmmKnTest, PerChannelFoldRefusesTheStridedWeight) {
  Graph g = golden("neg_conv1d_channel_mul.vfir");
  attach(g, "w", wave);
  attach(g, "b", ramp);
  attach(g, "scale", ramp);
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->rewrites["canonicalize-addmm-kn"], 1);
  EXPECT_EQ(r->rewrites.count("per-channel-mul-fold"), 0u);
  EXPECT_NE(liveOp(g, "aten::mul"), nullptr);
  EXPECT_TRUE(anyContains(nearMisses(*r, "per-channel-mul-fold"), "strided view")) << ir::printGraph(g);
}

TEST(AddmmKnTest, GuardsBetaAlphaAndBias) {
  for (const char* bad : {"aten::addmm($b, %x, $w, 2, 1)", "aten::addmm($b2, %x, $w, 1, 1)"}) {
    std::string text = kConv1d;
    text.replace(text.find("aten::addmm($b, %x, $w, 1, 1)"), std::string("aten::addmm($b, %x, $w, 1, 1)").size(), bad);
    text.replace(text.find("constants {\n"), 12, "constants {\n  $b2 : f32[3]\n");
    Graph g = parse(text);
    auto r = runPipeline(g, admitted());
    ASSERT_TRUE(r.isOk());
    EXPECT_EQ(r->rewrites.count("canonicalize-addmm-kn"), 0u) << bad;
    EXPECT_FALSE(nearMisses(*r, "canonicalize-addmm-kn").empty()) << bad;
  }
}

// ---- activations -------------------------------------------------------------------------------------

TEST(ActivationRecognitionTest, NearMissesNameTheWrongConstants) {
  Graph g = golden("neg_activations_written_out.vfir");
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(anyContains(nearMisses(*r, "gelu-tanh-recognize"), "cubic coefficient 0.04472"));
  EXPECT_TRUE(anyContains(nearMisses(*r, "gelu-erf-recognize"), "x / 1.4142135623730951"));
  EXPECT_EQ(liveOp(g, "aten::gelu"), nullptr);
  EXPECT_EQ(liveOp(g, "aten::silu"), nullptr);
}

// ---- attention-to-sdpa ----------------------------------------------------------------------------------

TEST(AttentionTest, SdpaCarriesScaleAndMaskAndALogsumexpOutput) {
  Graph g = golden("bert_attention.vfir");
  auto r = runPipeline(g, admitted(VerifyLevel::kRules));
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  const ir::Node* sdpa = liveOp(g, "aten::_scaled_dot_product_flash_attention_for_cpu");
  ASSERT_NE(sdpa, nullptr);
  ASSERT_EQ(sdpa->args.size(), 7u);
  EXPECT_EQ(sdpa->args[3], Arg::real(0.0));     // dropout_p
  EXPECT_EQ(sdpa->args[4], Arg::boolean(false));  // is_causal
  EXPECT_TRUE(sdpa->args[5].isValue());          // attn_mask: the where(...) float mask
  EXPECT_EQ(g.node(g.value(static_cast<ir::ValueId>(sdpa->args[5].i)).producer).op, "aten::where");
  EXPECT_EQ(sdpa->args[6], Arg::real(0.5));  // scores / 2.0
  ASSERT_EQ(sdpa->outputs.size(), 2u);
  EXPECT_EQ(g.value(sdpa->outputs[1]).shape, (std::vector<int64_t>{2, 2, 4}));
  EXPECT_EQ(liveOp(g, "aten::bmm"), nullptr);
  EXPECT_EQ(liveOp(g, "aten::_softmax"), nullptr);
}

TEST(AttentionTest, NearMissesSayWhyNot) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"neg_attention_softmax_axis.vfir", "softmax is not over the last axis"},
      {"neg_attention_mask_dtype.vfir", "not provably a float32 tensor"},
      {"neg_attention_probs_read.vfir", "read elsewhere"},
      {"neg_attention_dynamic.vfir", "static"},
  };
  for (const auto& [file, reason] : cases) {
    Graph g = golden(file);
    auto r = runPipeline(g, admitted());
    ASSERT_TRUE(r.isOk()) << file;
    EXPECT_EQ(liveOp(g, "aten::_scaled_dot_product_flash_attention_for_cpu"), nullptr) << file;
    EXPECT_TRUE(anyContains(nearMisses(*r, "attention-to-sdpa"), reason))
        << file << ": " << (nearMisses(*r, "attention-to-sdpa").empty() ? "no near miss" : nearMisses(*r, "attention-to-sdpa")[0]);
  }
}

TEST(AttentionTest, PlantedScaleOneOverDIsRefutedAndNeverApplies) {
  // The transformer planted bug: the same pattern, rewritten with scale 1/D = 1/4 instead of the
  // graph's 1/sqrt(D) = 0.5. Its proof is Refuted, so only the correct rule rewrites.
  Graph g = golden("attention_inputs.vfir");
  auto planted = rules::plantedAttentionBugRule();
  ASSERT_TRUE(planted.isOk()) << planted.status().toString();
  PipelineOptions o;
  o.verify = VerifyLevel::kRules;
  o.proveRule = proveWithZ3;
  o.extraRules.push_back(std::move(planted).value());
  auto r = runPipeline(g, o);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  auto proof = std::find_if(r->proofs.begin(), r->proofs.end(),
                            [](const ProofOutcome& p) { return p.rule == "test-planted-attention-scale-one-over-d"; });
  ASSERT_NE(proof, r->proofs.end());
  EXPECT_EQ(proof->verdict, "Refuted") << proof->message;
  EXPECT_FALSE(proof->admitted);
  EXPECT_NE(proof->message.find("attn.scale"), std::string::npos) << proof->message;
  EXPECT_EQ(r->rewrites.count("test-planted-attention-scale-one-over-d"), 0u);
  EXPECT_EQ(r->rewrites["attention-to-sdpa"], 1);
  const ir::Node* sdpa = liveOp(g, "aten::_scaled_dot_product_flash_attention_for_cpu");
  ASSERT_NE(sdpa, nullptr);
  EXPECT_EQ(sdpa->args[6], Arg::real(0.5));
  // Its own proof: Refuted with a counterexample, while attention-to-sdpa is Proved.
  verify::ProveAllOptions options;
  options.maxK = 2;
  auto plantedAgain = rules::plantedAttentionBugRule();
  const verify::RuleResult pr = verify::proveRule(plantedAgain->proof(), options);
  EXPECT_EQ(pr.verdict.kind, verify::VerdictKind::Refuted);
  EXPECT_FALSE(pr.verdict.counterexample.empty());
  auto ids = pipelineRules();
  ASSERT_TRUE(ids.isOk());
  for (const rules::Rule& rule : *ids) EXPECT_NE(rule.id(), "test-planted-attention-scale-one-over-d");
}

// ---- qkv-concat -----------------------------------------------------------------------------------------

/// The bert_attention golden with data for the projections.
Graph bertWithData() {
  Graph g = golden("bert_attention.vfir");
  for (const char* w : {"query.weight", "key.weight", "value.weight", "output.weight"}) attach(g, w, wave);
  attach(g, "query.bias", ramp);
  attach(g, "key.bias", [](size_t i) { return 10.0f + static_cast<float>(i); });
  attach(g, "value.bias", [](size_t i) { return -10.0f - static_cast<float>(i); });
  attach(g, "output.bias", ramp);
  return g;
}

TEST(QkvConcatTest, ConcatenationIsExactAndCheckedBitForBit) {
  Graph g = bertWithData();
  // Distinct rows per projection, so a row from the wrong place shows.
  attach(g, "key.weight", [](size_t i) { return 100.0f + static_cast<float>(i); });
  attach(g, "value.weight", [](size_t i) { return -100.0f - static_cast<float>(i); });
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  const rules::FusionRecord* rec = recordOf(r->fusions, "qkv-concat");
  ASSERT_NE(rec, nullptr);
  EXPECT_TRUE(rec->applied);
  EXPECT_EQ(rec->instance.verdict, "Proved") << rec->instance.detail;
  EXPECT_EQ(rec->fold.kind, rules::FoldRecord::Kind::kConcat);
  ASSERT_EQ(rec->fold.parts.size(), 3u);
  // The concatenated weight, materialized: rows 0-7 are Q's, 8-15 K's, 16-23 V's.
  const ir::ConstantTensor& cat = g.constants()[static_cast<size_t>(rec->fold.foldedWeight)];
  EXPECT_EQ(cat.sizes, (std::vector<int64_t>{24, 8}));
  std::shared_ptr<std::vector<float>> keep;
  const float* d = cat.floatData(keep);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d[0], wave(0));
  EXPECT_EQ(d[8 * 8 + 3], 100.0f + 3.0f);
  EXPECT_EQ(d[16 * 8 + 9], -100.0f - 9.0f);
  std::shared_ptr<std::vector<float>> keepBias;
  const float* b = g.constants()[static_cast<size_t>(rec->fold.foldedBias)].floatData(keepBias);
  EXPECT_EQ(b[8], 10.0f);
  EXPECT_EQ(b[23], -17.0f);
  // The slices: offsets 0, 8, 16 of the last dim.
  std::vector<int64_t> starts;
  for (const ir::Node& n : g.nodes()) {
    if (!n.erased && n.op == "aten::slice" && n.args[0].isValue() &&
        g.node(g.value(static_cast<ir::ValueId>(n.args[0].i)).producer).op == rules::kLinearOp) {
      EXPECT_EQ(n.args[1], Arg::integer(2));
      starts.push_back(n.args[2].i);
    }
  }
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 8, 16}));
  // A concatenation that is off by one value is Refuted by the instance check.
  rules::FusionRecord tampered = *rec;
  Graph bad = g;
  auto wrong = std::make_shared<std::vector<float>>(d, d + 24 * 8);
  (*wrong)[8 * 8 + 5] = std::nextafter((*wrong)[8 * 8 + 5], 1e9f);  // one ulp off
  ir::ConstantTensor& c = bad.mutableConstants()[static_cast<size_t>(rec->fold.foldedWeight)];
  c.materialize = nullptr;
  c.data = wrong->data();
  c.owner = wrong;
  EXPECT_EQ(validateFoldInstance(bad, tampered).verdict, "Refuted");
}

/// Gives constant \p name bf16 data: the bits of value(i) rounded to bf16 (truncated; any bits do).
std::shared_ptr<std::vector<uint16_t>> attachBf16(Graph& g, const std::string& name, float (*value)(size_t)) {
  auto buffer = attachBuffer<uint16_t>(g, name, [value](size_t i) {
    const float v = value(i);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return static_cast<uint16_t>(bits >> 16);
  });
  g.mutableConstants().at(static_cast<size_t>(constantNamed(g, name))).dtype = ir::DType::BFloat16;
  return buffer;
}

TEST(QkvConcatTest, Bf16ProjectionsAreCopiedBitForBit) {
  // A bf16 model's projections: the concatenation is bf16 too (its bits are the projections'),
  // built when the rule applies, and the instance check compares the bits.
  Graph g = golden("bert_attention.vfir");
  for (const char* w : {"query.weight", "key.weight", "value.weight", "output.weight"}) attachBf16(g, w, wave);
  attachBf16(g, "key.weight", [](size_t i) { return 100.0f + static_cast<float>(i); });
  for (const char* b : {"query.bias", "key.bias", "value.bias", "output.bias"}) attachBf16(g, b, ramp);
  attachBf16(g, "value.bias", [](size_t i) { return -10.0f - static_cast<float>(i); });
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  const rules::FusionRecord* rec = recordOf(r->fusions, "qkv-concat");
  ASSERT_NE(rec, nullptr);
  EXPECT_TRUE(rec->applied);
  EXPECT_EQ(rec->instance.verdict, "Proved") << rec->instance.detail;
  const ir::ConstantTensor& cat = g.constants()[static_cast<size_t>(rec->fold.foldedWeight)];
  ASSERT_EQ(cat.dtype, ir::DType::BFloat16);
  EXPECT_EQ(cat.sizes, (std::vector<int64_t>{24, 8}));
  const auto* w = static_cast<const uint16_t*>(cat.data);
  const auto* key = static_cast<const uint16_t*>(g.constants()[static_cast<size_t>(rec->fold.parts[1])].data);
  EXPECT_EQ(w[8 * 8 + 3], key[3]);
  const ir::ConstantTensor& bias = g.constants()[static_cast<size_t>(rec->fold.foldedBias)];
  ASSERT_EQ(bias.dtype, ir::DType::BFloat16);
  const auto* vb = static_cast<const uint16_t*>(g.constants()[static_cast<size_t>(rec->fold.partBiases[2])].data);
  EXPECT_EQ(static_cast<const uint16_t*>(bias.data)[16 + 2], vb[2]);
  // One bit off in the copy (weight or bias): Refuted.
  for (ir::ConstantId target : {rec->fold.foldedWeight, rec->fold.foldedBias}) {
    Graph bad = g;
    ir::ConstantTensor& c = bad.mutableConstants()[static_cast<size_t>(target)];
    auto wrong = std::make_shared<std::vector<uint16_t>>(static_cast<const uint16_t*>(c.data),
                                                         static_cast<const uint16_t*>(c.data) + c.numel());
    (*wrong)[9] ^= 1;
    c.data = wrong->data();
    c.owner = wrong;
    EXPECT_EQ(validateFoldInstance(bad, *rec).verdict, "Refuted");
  }
}

TEST(QkvConcatTest, StridedPartsAreCopiedThroughTheirStrides) {
  // Two Conv1D projections (weights stored [K, N], read through transposed views) of one input.
  Graph g = parse(R"(graph(%x : Tensor[1, 4, 8]) {
  %0 : Tensor[4, 8] = aten::view(%x, [4, 8])
  %1 : Tensor[4, 8] = aten::addmm($bq, %0, $wq, 1, 1)
  %2 : Tensor[1, 4, 8] = aten::view(%1, [1, 4, 8])
  %3 : Tensor[1, 4, 2, 4] = aten::view(%2, [1, 4, 2, 4])
  %4 : Tensor[1, 2, 4, 4] = aten::permute(%3, [0, 2, 1, 3])
  %5 : Tensor[4, 8] = aten::view(%x, [4, 8])
  %6 : Tensor[4, 8] = aten::addmm($bk, %5, $wk, 1, 1)
  %7 : Tensor[1, 4, 8] = aten::view(%6, [1, 4, 8])
  %8 : Tensor[1, 4, 2, 4] = aten::view(%7, [1, 4, 2, 4])
  %9 : Tensor[1, 2, 4, 4] = aten::permute(%8, [0, 2, 1, 3])
  %10 : Tensor[1, 2, 4, 4] = aten::add.Tensor(%4, %9, 1)
  return (%10)
}
constants {
  $bq : f32[8]
  $wq : f32[8, 8]
  $bk : f32[8]
  $wk : f32[8, 8]
}
)");
  auto wq = attach(g, "wq", wave);
  auto wk = attach(g, "wk", ramp);
  attach(g, "bq", ramp);
  attach(g, "bk", wave);
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->rewrites["canonicalize-addmm-kn"], 2);
  ASSERT_EQ(r->rewrites["qkv-concat"], 1);
  const rules::FusionRecord& rec = r->fusions.at(0);
  EXPECT_EQ(rec.instance.verdict, "Proved") << rec.instance.detail;
  std::shared_ptr<std::vector<float>> keep;
  const float* d = g.constants()[static_cast<size_t>(rec.fold.foldedWeight)].floatData(keep);
  ASSERT_NE(d, nullptr);
  // Row n of the concatenation is column n of the stored [K, N] weight.
  for (int64_t n = 0; n < 8; ++n) {
    for (int64_t k = 0; k < 8; ++k) {
      EXPECT_EQ(d[n * 8 + k], (*wq)[static_cast<size_t>(k * 8 + n)]);
      EXPECT_EQ(d[(8 + n) * 8 + k], (*wk)[static_cast<size_t>(k * 8 + n)]);
    }
  }
}

TEST(QkvConcatTest, RefusedWhereASliceWouldBreakAView) {
  Graph g = golden("neg_qkv_layout.vfir");
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->rewrites.count("qkv-concat"), 0u);
  EXPECT_TRUE(anyContains(nearMisses(*r, "qkv-concat"), "view")) << ir::printGraph(g);
}

// ---- the whole GPT-2 block under the real proof gate ---------------------------------------------------

TEST(TransformerPipelineTest, Gpt2BlockUnderTheProofGate) {
  Graph g = golden("gpt2_block.vfir");
  PipelineOptions o;
  o.verify = VerifyLevel::kRules;
  o.proveRule = proveWithZ3;
  auto r = runPipeline(g, o);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  for (const auto& p : r->proofs) EXPECT_TRUE(p.admitted) << p.rule << ": " << p.message;
  EXPECT_EQ(r->rewrites["canonicalize-addmm-kn"], 4);
  EXPECT_EQ(r->rewrites["gelu-tanh-recognize"], 1);
  EXPECT_EQ(r->rewrites["attention-to-sdpa"], 1);
  EXPECT_EQ(r->rewrites["conv-gelu-tanh-postop"], 1);
  EXPECT_EQ(r->rewrites["residual-add-sum-postop"], 2);
  EXPECT_EQ(liveOp(g, "aten::addmm"), nullptr);
  EXPECT_EQ(liveOp(g, "aten::tanh"), nullptr);
}

}  // namespace
}  // namespace verifuse::passes
