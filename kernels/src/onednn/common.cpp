// Engine, per-thread stream and scratch, error mapping, post-op attributes, PrimitiveKernel.
#include "common.h"

#include "cpu/weight_memory.h"
#include "verifuse/kernels/capabilities.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

namespace verifuse::kernels {
namespace onednn {

const dnnl::engine& engine() {
  // The capability model caps oneDNN's ISA before oneDNN's first use (capabilities.h).
  static const dnnl::engine eng = (capabilities(), dnnl::engine(dnnl::engine::kind::cpu, 0));
  return eng;
}

dnnl::stream& threadStream() {
  thread_local dnnl::stream s(engine());
  return s;
}

namespace {
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
struct ScratchSlot {
  std::unique_ptr<void, FreeDeleter> ptr;
  size_t capacity = 0;
};
std::atomic<int64_t> gPrimitiveCount{0};
}  // namespace

void* threadScratch(int slot, size_t bytes) {
  thread_local ScratchSlot slots[kMaxScratchSlots];
  if (bytes == 0) return nullptr;
  ScratchSlot& s = slots[slot];
  if (s.capacity < bytes) {
    size_t cap = (bytes + 4095) / 4096 * 4096;  // page multiple; also a multiple of 64
    void* p = std::aligned_alloc(64, cap);
    if (p == nullptr) throw std::bad_alloc();
    s.ptr.reset(p);
    s.capacity = cap;
  }
  return s.ptr.get();
}

void notePrimitiveCreated() { gPrimitiveCount.fetch_add(1, std::memory_order_relaxed); }

dt toDnnl(DataType t) {
  switch (t) {
    case DataType::kBF16: return dt::bf16;
    case DataType::kU8: return dt::u8;
    case DataType::kS8: return dt::s8;
    case DataType::kF32: break;
  }
  return dt::f32;
}
DataType fromDnnl(dt t) {
  return t == dt::bf16 ? DataType::kBF16 : t == dt::u8 ? DataType::kU8 : t == dt::s8 ? DataType::kS8 : DataType::kF32;
}

dnnl::algorithm toDnnl(BinaryAlg a) {
  switch (a) {
    case BinaryAlg::kAdd: return dnnl::algorithm::binary_add;
    case BinaryAlg::kMul: return dnnl::algorithm::binary_mul;
    case BinaryAlg::kSub: return dnnl::algorithm::binary_sub;
    case BinaryAlg::kDiv: return dnnl::algorithm::binary_div;
    case BinaryAlg::kMax: return dnnl::algorithm::binary_max;
    case BinaryAlg::kMin: return dnnl::algorithm::binary_min;
  }
  return dnnl::algorithm::binary_add;
}

EltwiseMapping mapActivation(Activation a, float alpha, float beta) {
  using A = dnnl::algorithm;
  switch (a) {
    case Activation::kRelu: return {A::eltwise_relu, 0.f, 0.f};
    case Activation::kLeakyRelu: return {A::eltwise_relu, alpha, 0.f};
    case Activation::kGeluErf: return {A::eltwise_gelu_erf, 0.f, 0.f};
    case Activation::kGeluTanh: return {A::eltwise_gelu_tanh, 0.f, 0.f};
    case Activation::kSilu: return {A::eltwise_swish, 1.f, 0.f};
    case Activation::kSigmoid: return {A::eltwise_logistic, 0.f, 0.f};
    case Activation::kTanh: return {A::eltwise_tanh, 0.f, 0.f};
    case Activation::kHardswish: return {A::eltwise_hardswish, 1.f / 6.f, 0.5f};
    case Activation::kHardsigmoid: return {A::eltwise_hardsigmoid, 1.f / 6.f, 0.5f};
    case Activation::kClamp: return {A::eltwise_clip, alpha, beta};
    case Activation::kElu: return {A::eltwise_elu, alpha, 0.f};
    case Activation::kLinear: return {A::eltwise_linear, alpha, beta};
  }
  return {A::eltwise_relu, 0.f, 0.f};
}

tag plainTag(int rank) {
  switch (rank) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    case 6: return tag::abcdef;
    default: return tag::undef;
  }
}

tag channelsLastTag(int rank) {
  switch (rank) {
    case 3: return tag::acb;
    case 4: return tag::acdb;
    case 5: return tag::acdeb;
    default: return plainTag(rank);
  }
}

dnnl::memory::desc activationDesc(const dims& d, dt type, Format f) {
  switch (f) {
    case Format::kPlain: return {d, type, plainTag(static_cast<int>(d.size()))};
    case Format::kChannelsLast: return {d, type, channelsLastTag(static_cast<int>(d.size()))};
    case Format::kAny: return {d, type, tag::any};
  }
  return {d, type, tag::any};
}

Status fromError(const dnnl::error& e, const std::string& what) {
  StatusCode code = StatusCode::kInternal;
  if (e.status == dnnl_unimplemented) code = StatusCode::kUnimplemented;
  if (e.status == dnnl_invalid_arguments) code = StatusCode::kInvalidArgument;
  return Status(code, what + ": oneDNN: " + e.what());
}

dnnl::primitive_attr userScratchAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

RuntimeInput makeInput(int arg, const dnnl::memory::desc& userMd,
                       const dnnl::memory::desc& primMd) {
  RuntimeInput in;
  in.arg = arg;
  in.userMd = userMd;
  in.primMd = primMd;
  if (userMd != primMd) {
    dnnl::reorder::primitive_desc pd(engine(), userMd, engine(), primMd, userScratchAttr());
    in.convert = makePrimitive<dnnl::reorder>(pd);
    in.convertScratch = pd.scratchpad_desc().get_size();
  }
  return in;
}

StatusOr<dnnl::primitive_attr> makeAttr(const std::vector<PostOp>& postOps, const dims& dstDims,
                                        std::vector<RuntimeInput>* binaryInputs, dt operandType) {
  dnnl::primitive_attr attr = userScratchAttr();
  dnnl::post_ops po;
  for (size_t i = 0; i < postOps.size(); ++i) {
    const PostOp& op = postOps[i];
    switch (op.kind) {
      case PostOp::Kind::kEltwise: {
        EltwiseMapping m = mapActivation(op.act, op.alpha, op.beta);
        po.append_eltwise(m.alg, m.alpha, m.beta);
        break;
      }
      case PostOp::Kind::kSum: po.append_sum(op.scale); break;
      case PostOp::Kind::kBinary: {
        if (op.binaryDims.size() != dstDims.size()) {
          return invalidArgument("binary post-op " + std::to_string(i) + ": operand dims " +
                                 dimsToString(op.binaryDims) + " must have the rank of dst " +
                                 dimsToString(dstDims));
        }
        for (size_t d = 0; d < dstDims.size(); ++d) {
          if (op.binaryDims[d] != 1 && op.binaryDims[d] != dstDims[d]) {
            return invalidArgument("binary post-op " + std::to_string(i) + ": operand dims " +
                                   dimsToString(op.binaryDims) + " do not broadcast to dst " +
                                   dimsToString(dstDims));
          }
        }
        dnnl::memory::desc md(op.binaryDims, operandType, plainTag(static_cast<int>(dstDims.size())));
        po.append_binary(toDnnl(op.binaryAlg), md);
        binaryInputs->push_back(
            makeInput(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1, md, md));
        break;
      }
    }
  }
  attr.set_post_ops(po);
  return attr;
}

ConstantArg packConstant(int arg, const void* src, const dnnl::memory::desc& userMd,
                         const dnnl::memory::desc& packedMd) {
  std::shared_ptr<void> buffer(cpu::allocateWeightMemory(packedMd.get_size()), cpu::freeWeightMemory);
  if (!buffer) throw dnnl::error(dnnl_out_of_memory, "packing a constant");
  dnnl::memory packed(packedMd, engine(), buffer.get());
  dnnl::memory user(userMd, engine(), const_cast<void*>(src));
  if (userMd == packedMd) {
    std::memcpy(packed.get_data_handle(), src, userMd.get_size());
    return ConstantArg(arg, std::move(packed), std::move(buffer));
  }
  dnnl::reorder::primitive_desc pd(engine(), userMd, engine(), packedMd, userScratchAttr());
  auto r = makePrimitive<dnnl::reorder>(pd);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, packed}};
  size_t sp = pd.scratchpad_desc().get_size();
  if (sp > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(pd.scratchpad_desc(), engine(), threadScratch(0, sp)));
  }
  r.execute(threadStream(), args);
  threadStream().wait();
  return ConstantArg(arg, std::move(packed), std::move(buffer));
}

PrimitiveKernel::PrimitiveKernel(const char* name, dnnl::primitive prim, size_t primScratch,
                                 std::string impl, std::vector<RuntimeInput> inputs,
                                 dnnl::memory::desc dstMd,
                                 std::vector<ConstantArg> constants, bool borrowsWeights)
    : name_(name),
      prim_(std::move(prim)),
      inputs_(std::move(inputs)),
      dstMd_(std::move(dstMd)),
      constants_(std::move(constants)) {
  implInfo_ = std::move(impl);
  scratchpadBytes_ = primScratch;
  borrowsWeights_ = borrowsWeights;
  for (const RuntimeInput& in : inputs_) {
    inputLayouts_.push_back(toLayout(in.userMd));
    scratchpadBytes_ = std::max(scratchpadBytes_, in.convertScratch);
  }
  outputLayout_ = toLayout(dstMd_);
}

Status PrimitiveKernel::execute(std::span<const void* const> inputs, void* output) const {
  if (inputs.size() != inputs_.size()) {
    return invalidArgument(std::string(name_) + ": expected " + std::to_string(inputs_.size()) +
                           " inputs, got " + std::to_string(inputs.size()));
  }
  if (output == nullptr) return invalidArgument(std::string(name_) + ": null output");
  return guarded(std::string(name_) + " execute", [&]() -> Status {
    const dnnl::engine& eng = engine();
    dnnl::stream& s = threadStream();
    std::unordered_map<int, dnnl::memory> args;
    args.reserve(inputs_.size() + constants_.size() + 2);
    if (scratchpadBytes_ > 0) {
      // Any scratchpad md of the right size works; describe it as a byte array.
      dnnl::memory::desc spMd({static_cast<dnnl::memory::dim>(scratchpadBytes_)}, dt::u8, tag::a);
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(spMd, eng, threadScratch(0, scratchpadBytes_)));
    }
    int slot = 1;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const RuntimeInput& in = inputs_[i];
      if (inputs[i] == nullptr) {
        return invalidArgument(std::string(name_) + ": null input " + std::to_string(i));
      }
      dnnl::memory user(in.userMd, eng, const_cast<void*>(inputs[i]));
      if (!in.convert) {
        args.emplace(in.arg, user);
        continue;
      }
      if (slot >= kMaxScratchSlots) return internalError("too many converted inputs");
      dnnl::memory staged(in.primMd, eng, threadScratch(slot++, in.primMd.get_size()));
      std::unordered_map<int, dnnl::memory> cargs{{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, staged}};
      if (in.convertScratch > 0) cargs.emplace(DNNL_ARG_SCRATCHPAD, args.at(DNNL_ARG_SCRATCHPAD));
      in.convert->execute(s, cargs);
      args.emplace(in.arg, staged);
    }
    for (const ConstantArg& c : constants_) args.emplace(c.arg, c.memory);
    args.emplace(DNNL_ARG_DST, dnnl::memory(dstMd_, eng, output));
    prim_.execute(s, args);
    s.wait();
    return Status::ok();
  });
}

Status spatialVector(const std::vector<int64_t>& v, size_t n, int64_t dflt, const char* what,
                     dims* out) {
  if (v.empty()) {
    out->assign(n, dflt);
    return Status::ok();
  }
  if (v.size() == 1 && n > 1) {
    out->assign(n, v[0]);
    return Status::ok();
  }
  if (v.size() != n) {
    return invalidArgument(std::string(what) + " has " + std::to_string(v.size()) +
                           " entries, expected " + std::to_string(n));
  }
  out->assign(v.begin(), v.end());
  return Status::ok();
}

std::string dimsToString(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(d[i]);
  }
  s += ']';
  return s;
}

}  // namespace onednn

// ---- Layout --------------------------------------------------------------------------------------

using namespace onednn;

const dnnl::memory::desc& LayoutAccess::desc(const Layout& l) {
  static const dnnl::memory::desc kEmpty;
  return l.impl_ ? l.impl_->md : kEmpty;
}

Layout LayoutAccess::make(const dnnl::memory::desc& md) {
  return Layout(std::make_shared<const Layout::Impl>(Layout::Impl{md}));
}

size_t dataTypeSize(DataType d) {
  return d == DataType::kBF16 ? 2 : (d == DataType::kU8 || d == DataType::kS8) ? 1 : 4;
}
const char* dataTypeName(DataType d) {
  switch (d) {
    case DataType::kBF16: return "bf16";
    case DataType::kU8: return "u8";
    case DataType::kS8: return "s8";
    case DataType::kF32: break;
  }
  return "f32";
}

Layout Layout::plain(const std::vector<int64_t>& dimsIn, const std::vector<int64_t>& strides,
                     DataType dtype) {
  onednn::dims d(dimsIn.begin(), dimsIn.end());
  if (strides.empty()) return contiguous(dimsIn, dtype);
  onednn::dims s(strides.begin(), strides.end());
  if (s.size() != d.size()) return Layout();
  try {
    return toLayout(dnnl::memory::desc(d, toDnnl(dtype), s));
  } catch (const dnnl::error&) {
    return Layout();  // e.g. overlapping strides: no oneDNN layout describes them
  }
}

Layout Layout::contiguous(const std::vector<int64_t>& dimsIn, DataType dtype) {
  onednn::dims d(dimsIn.begin(), dimsIn.end());
  onednn::dims s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  try {
    return toLayout(dnnl::memory::desc(d, toDnnl(dtype), s));
  } catch (const dnnl::error&) {
    return Layout();  // e.g. rank 0 or > 12, negative dims
  }
}

Layout Layout::channelsLast(const std::vector<int64_t>& dimsIn, DataType dtype) {
  if (dimsIn.size() < 3 || dimsIn.size() > 5) return contiguous(dimsIn, dtype);
  onednn::dims d(dimsIn.begin(), dimsIn.end());
  try {
    return toLayout(
        dnnl::memory::desc(d, toDnnl(dtype), channelsLastTag(static_cast<int>(d.size()))));
  } catch (const dnnl::error&) {
    return Layout();
  }
}

std::vector<int64_t> Layout::dims() const {
  if (!impl_) return {};
  auto d = impl_->md.get_dims();
  return {d.begin(), d.end()};
}
int Layout::rank() const { return impl_ ? impl_->md.get_ndims() : 0; }
int64_t Layout::numElements() const {
  if (!impl_) return 0;
  int64_t n = 1;
  for (auto v : impl_->md.get_dims()) n *= v;
  return n;
}
DataType Layout::dtype() const { return impl_ ? fromDnnl(impl_->md.get_data_type()) : DataType::kF32; }
size_t Layout::byteSize() const { return impl_ ? impl_->md.get_size() : 0; }

bool Layout::isPlain() const {
  if (!impl_) return false;
  const auto& md = impl_->md;
  if (md.get_format_kind() != dnnl::memory::format_kind::blocked) return false;
  if (md.get_inner_nblks() != 0) return false;
  return md.get_padded_dims() == md.get_dims();
}

std::vector<int64_t> Layout::strides() const {
  if (!isPlain()) return {};
  auto s = impl_->md.get_strides();
  return {s.begin(), s.end()};
}

bool Layout::isContiguous() const {
  if (!isPlain()) return false;
  return *this == contiguous(dims(), dtype());
}

std::string Layout::toString() const {
  if (!impl_) return "<empty>";
  const auto& md = impl_->md;
  std::string s = std::string(dataTypeName(dtype())) + dimsToString(dims());
  if (md.get_format_kind() != dnnl::memory::format_kind::blocked) return s + " opaque";
  auto st = md.get_strides();
  s += " strides=" + dimsToString({st.begin(), st.end()});
  if (md.get_inner_nblks() > 0) {
    auto blks = md.get_inner_blks();
    auto idxs = md.get_inner_idxs();
    s += " inner=";
    for (size_t i = 0; i < blks.size(); ++i) {
      s += std::to_string(blks[i]) + static_cast<char>('a' + idxs[i]);
    }
  }
  return s;
}

bool Layout::operator==(const Layout& other) const {
  if (!impl_ || !other.impl_) return impl_ == other.impl_;
  return impl_->md == other.impl_->md;
}

// ---- runtime info --------------------------------------------------------------------------------

std::string onednnVersion() {
  const dnnl_version_t* v = dnnl::version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (" + v->hash + ")";
}

int64_t primitiveCreationCount() { return gPrimitiveCount.load(std::memory_order_relaxed); }

// ---- post-op helpers -----------------------------------------------------------------------------

PostOp PostOp::eltwise(Activation a, float alpha, float beta) {
  PostOp p;
  p.kind = Kind::kEltwise;
  p.act = a;
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

PostOp PostOp::sum(float scale) {
  PostOp p;
  p.kind = Kind::kSum;
  p.scale = scale;
  return p;
}

PostOp PostOp::binary(BinaryAlg alg, std::vector<int64_t> dims) {
  PostOp p;
  p.kind = Kind::kBinary;
  p.binaryAlg = alg;
  p.binaryDims = std::move(dims);
  return p;
}

const char* activationName(Activation a) {
  switch (a) {
    case Activation::kRelu: return "relu";
    case Activation::kLeakyRelu: return "leaky_relu";
    case Activation::kGeluErf: return "gelu_erf";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kSilu: return "silu";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kTanh: return "tanh";
    case Activation::kHardswish: return "hardswish";
    case Activation::kHardsigmoid: return "hardsigmoid";
    case Activation::kClamp: return "clamp";
    case Activation::kElu: return "elu";
    case Activation::kLinear: return "linear";
  }
  return "?";
}

const char* binaryAlgName(BinaryAlg a) {
  switch (a) {
    case BinaryAlg::kAdd: return "add";
    case BinaryAlg::kMul: return "mul";
    case BinaryAlg::kSub: return "sub";
    case BinaryAlg::kDiv: return "div";
    case BinaryAlg::kMax: return "max";
    case BinaryAlg::kMin: return "min";
  }
  return "?";
}

}  // namespace verifuse::kernels
