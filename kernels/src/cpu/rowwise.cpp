// The row engine's interpreter: binds a program (rowwise_program.cpp builds and validates them) to
// layouts (createRowKernel) and runs it tile by tile.
//
// Plan (built once in createRowKernel):
//  - every program value gets a kind: uniform (constants; folded at creation), per-row scalar, or
//    row vector; a reduction or rotate_half of a non-vector operand first materialises it;
//  - the instructions are grouped into steps: "chunked" groups of vector instructions (loads,
//    pointwise ops, stores) that run chunk by chunk over a tile (kChunk floats at a time, so all
//    of a group's temporaries stay in L1), and "tile" steps that run once per tile: per-row scalar
//    ops (hoisted in front of the chunked group they feed), reductions and rotate_half (barriers:
//    they need the whole row);
//  - each value gets a scratch slot by linear scan over the final order: vectors used only inside
//    their own chunked group get a chunk-sized slot, the others a row-sized one.
// A tile is one row (chunked along C when C > kChunk) or several short rows (C <= kChunk / 2).
#include "verifuse/kernels/rowwise.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>

#include "cpu/rowwise_internal.h"
#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::rowwise {

using detail::IsaKernels;
using detail::Src;

// ---- The interpreter -----------------------------------------------------------------------------

bool avx2Available() { return cpu::hasAvx2Fma(); }

using detail::isBinary;
using detail::isReduce;

namespace {

constexpr int64_t kMaxCols = 65536;
/// Floats per slot and row chunk: a chunked group touches kChunk floats of each of its values.
constexpr int64_t kChunk = 1024;
/// Below this many elements per thread, fewer threads are used (fork/join costs ~ microseconds).
constexpr int64_t kMinElemsPerThread = 16384;

int64_t roundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
size_t elemSize(ElemType t) { return t == ElemType::kF32 ? 4 : (t == ElemType::kBF16 ? 2 : 1); }

enum class Kind : uint8_t { kUniform, kRow, kVec };
enum class NodeType : uint8_t { kLoad, kConst, kUnary, kBinary, kBinary2, kWhere, kReduce, kRotate, kStore, kBroadcast, kDead };

struct Node {
  NodeType type = NodeType::kConst;
  RowOp op = RowOp::kConst;
  RowOp op2 = RowOp::kConst;  // kBinary2: op2(op(a, b), c), or op2(c, op(a, b)) if swap2
  bool swap2 = false;
  int a = -1, b = -1, c = -1;
  int index = -1;
  float f0 = 0.f, f1 = 0.f;
  Kind kind = Kind::kUniform;
  float uniform = 0.f;  // kUniform: the value
  // plan
  int step = -1, pos = -1, lastUse = -1;
  bool rowResident = false;
  bool view = false;  // kLoad read in place from the input (f32 dense rows): no slot, no copy
  int directOut = -1;        // a producer that writes output directOut itself in full chunks
  bool storeFused = false;   // a kStore whose producer wrote the full chunks (it stores the tail)
  int slot = -1;
};

struct Step {
  bool chunked = false;
  std::vector<int> nodes;
};

/// A tensor bound to the iteration space: outer strides in bytes per (collapsed) outer dim.
struct Binding {
  ElemType type = ElemType::kF32;
  bool rowScalar = false;       // inputs: one value per row (last dim broadcast)
  bool linearRows = false;      // row r starts at r * rowStride bytes (every tile's rows equally spaced)
  int64_t rowStride = 0;        // bytes, when linearRows
  std::vector<int64_t> outer;   // bytes, per collapsed outer dim
  std::vector<int64_t> effStrides;  // elements, per output dim (0 = broadcast), for layout equality
  int64_t lo = 0, hi = 0;       // byte extent relative to the data pointer, [lo, hi)
};

/// Per-thread scratch, 64-byte aligned, grown on demand and never shrunk (freed at thread exit).
struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
  ~Scratch() { std::free(p); }
  char* get(size_t n) {
    if (n > bytes) {
      std::free(p);
      p = nullptr;
      bytes = 0;
      if (posix_memalign(&p, 64, n) != 0) return nullptr;
      bytes = n;
    }
    return static_cast<char*>(p);
  }
};

class RowKernelImpl final : public RowKernel {
 public:
  Status init(const RowProgram& program, const std::vector<TensorDesc>& inputs,
              const std::vector<TensorDesc>& outputs, const RowKernelOptions& options);
  Status execute(std::span<const void* const> inputs, std::span<void* const> outputs) const override;
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  const char* isa() const override { return isa_->name; }
  std::string describe() const override;

 private:
  Status bind(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs);
  Status buildNodes(const RowProgram& program);
  void plan();
  void runTile(int64_t tile, char* scratch, const void* const* in, void* const* out) const;
  bool matchNorm(const RowProgram& program);
  void runNormRows(const void* const* in, void* const* out, int threads) const;

  // Pointers into a tile's scratch.
  float* vecBase(char* s, const Node& n) const {
    return reinterpret_cast<float*>(s + (n.rowResident ? rowResOff_ + static_cast<size_t>(n.slot) * rowResBytes_
                                                       : chunkOff_ + static_cast<size_t>(n.slot) * chunkBytes_));
  }
  float* rowSlot(char* s, const Node& n) const {
    return reinterpret_cast<float*>(s + scalarOff_ + static_cast<size_t>(n.slot) * scalarBytes_);
  }

  const IsaKernels* isa_ = nullptr;
  // A layer norm / RMSNorm program the ISA runs as one kernel per row (matchNorm).
  bool norm_ = false;
  detail::NormRow normRow_;
  int normX_ = -1, normW_ = -1, normB_ = -1;  // input numbers (-1: no weight / bias)
  std::vector<Node> nodes_;
  std::vector<Step> steps_;
  std::vector<Binding> in_, out_;
  std::vector<int64_t> outerSizes_;  // collapsed outer dims (size > 1)
  std::vector<std::vector<bool>> aliasOk_;  // [output][input]
  int64_t rows_ = 0, cols_ = 0, colsPad_ = 0;
  int64_t tileRows_ = 1, chunk_ = 0, numChunks_ = 1, tiles_ = 0;
  int numRowRes_ = 0, numChunkLoc_ = 0, numScalar_ = 0;
  size_t rowResBytes_ = 0, chunkBytes_ = 0, scalarBytes_ = 0;
  size_t offsOff_ = 0, idxOff_ = 0, rowResOff_ = 0, chunkOff_ = 0, scalarOff_ = 0, scratchBytes_ = 0;
};

/// Byte extent [lo, hi) of a strided tensor relative to its data pointer (empty -> [0, 0)).
void extent(const TensorDesc& d, int64_t& lo, int64_t& hi) {
  lo = 0;
  hi = 0;
  const int64_t es = static_cast<int64_t>(elemSize(d.type));
  for (int64_t s : d.sizes)
    if (s == 0) return;
  for (size_t i = 0; i < d.sizes.size(); ++i) {
    int64_t span = (d.sizes[i] - 1) * d.strides[i] * es;
    (span < 0 ? lo : hi) += span;
  }
  hi += es;
}

Status RowKernelImpl::bind(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs) {
  const TensorDesc& o0 = outputs[0];
  const size_t rank = o0.sizes.size();
  if (rank == 0) return invalidArgument("row kernel: outputs need rank >= 1");
  for (const TensorDesc& d : inputs)
    if (d.sizes.size() != d.strides.size()) return invalidArgument("row kernel: input sizes/strides ranks differ");
  for (const TensorDesc& d : outputs) {
    if (d.sizes.size() != d.strides.size()) return invalidArgument("row kernel: output sizes/strides ranks differ");
    if (d.sizes != o0.sizes) return invalidArgument("row kernel: outputs of different shapes");
    if (d.type == ElemType::kBool) return unsupported("row kernel: bool outputs");
  }
  for (int64_t s : o0.sizes)
    if (s < 0) return invalidArgument("row kernel: negative size");
  cols_ = o0.sizes.back();
  rows_ = 1;
  for (size_t i = 0; i + 1 < rank; ++i) rows_ *= o0.sizes[i];
  if (cols_ > kMaxCols) return unsupported("row kernel: rows longer than " + std::to_string(kMaxCols));
  colsPad_ = roundUp(std::max<int64_t>(cols_, 1), 8);

  // Effective strides over the output dims.
  std::vector<std::vector<int64_t>> eff;
  for (const TensorDesc& d : outputs) {
    if (cols_ > 1 && d.strides.back() != 1) return unsupported("row kernel: output rows are not dense (last stride != 1)");
    // Non-overlap: sorted by |stride|, each dim must step past everything the smaller ones span.
    std::vector<std::pair<int64_t, int64_t>> dims;  // |stride|, size
    for (size_t i = 0; i < rank; ++i)
      if (d.sizes[i] > 1) dims.push_back({std::llabs(d.strides[i]), d.sizes[i]});
    std::sort(dims.begin(), dims.end());
    if (std::find(d.sizes.begin(), d.sizes.end(), 0) != d.sizes.end()) dims.clear();  // empty: nothing overlaps
    int64_t span = 0;
    for (auto [st, sz] : dims) {
      if (st <= span) return unsupported("row kernel: output elements overlap");
      span += st * (sz - 1);
    }
    std::vector<int64_t> e(rank);
    for (size_t i = 0; i < rank; ++i) e[i] = d.sizes[i] == 1 ? 0 : d.strides[i];
    eff.push_back(e);
    Binding b;
    b.type = d.type;
    b.effStrides = e;
    extent(d, b.lo, b.hi);
    out_.push_back(b);
  }
  for (const TensorDesc& d : inputs) {
    if (d.sizes.size() > rank) return invalidArgument("row kernel: an input has a higher rank than the output");
    std::vector<int64_t> e(rank, 0);
    const size_t off = rank - d.sizes.size();
    for (size_t j = 0; j < d.sizes.size(); ++j) {
      const int64_t s = d.sizes[j], S = o0.sizes[off + j];
      if (s < 0) return invalidArgument("row kernel: negative size");
      if (s == S) e[off + j] = S == 1 ? 0 : d.strides[j];
      else if (s == 1) e[off + j] = 0;
      else return invalidArgument("row kernel: input shape does not broadcast to the output");
    }
    Binding b;
    b.type = d.type;
    if (cols_ > 1) {
      if (e.back() == 0) b.rowScalar = true;
      else if (e.back() != 1) return unsupported("row kernel: an input's last dim is strided (neither 1 nor 0)");
    }
    b.effStrides = e;
    extent(d, b.lo, b.hi);
    eff.push_back(e);
    in_.push_back(b);
  }

  // Collapse the outer dims: drop size-1 dims, merge d into d+1 where every tensor is contiguous
  // across them.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(eff.size());  // per tensor (outputs first), elements
  for (size_t i = 0; i + 1 < rank; ++i) {
    if (o0.sizes[i] == 1) continue;
    bool merge = !sizes.empty();
    for (size_t t = 0; t < eff.size() && merge; ++t) merge = strides[t].back() == eff[t][i] * o0.sizes[i];
    if (merge) {
      sizes.back() *= o0.sizes[i];
      for (size_t t = 0; t < eff.size(); ++t) strides[t].back() = eff[t][i];
    } else {
      sizes.push_back(o0.sizes[i]);
      for (size_t t = 0; t < eff.size(); ++t) strides[t].push_back(eff[t][i]);
    }
  }
  outerSizes_ = sizes;
  for (size_t t = 0; t < eff.size(); ++t) {
    Binding& b = t < out_.size() ? out_[t] : in_[t - out_.size()];
    const int64_t es = static_cast<int64_t>(elemSize(b.type));
    for (int64_t s : strides[t]) b.outer.push_back(s * es);
    b.linearRows = true;
    for (size_t d = 0; d + 1 < b.outer.size(); ++d)
      b.linearRows = b.linearRows && b.outer[d] == b.outer[d + 1] * sizes[d + 1];
    b.rowStride = b.outer.empty() ? 0 : b.outer.back();
  }
  return Status::ok();
}

Status RowKernelImpl::buildNodes(const RowProgram& program) {
  const std::vector<RowInstr>& instrs = program.instructions();
  std::vector<int> map(instrs.size(), -1);
  auto kindOf = [&](int n) { return nodes_[static_cast<size_t>(n)].kind; };
  auto materialize = [&](int n) {
    if (kindOf(n) == Kind::kVec) return n;
    Node m;
    m.type = NodeType::kBroadcast;
    m.a = n;
    m.kind = Kind::kVec;
    nodes_.push_back(m);
    return static_cast<int>(nodes_.size()) - 1;
  };
  for (size_t i = 0; i < instrs.size(); ++i) {
    const RowInstr& in = instrs[i];
    Node n;
    n.op = in.op;
    n.index = in.index;
    n.f0 = in.f0;
    n.f1 = in.f1;
    auto op = [&](int32_t id) { return id < 0 ? -1 : map[static_cast<size_t>(id)]; };
    n.a = op(in.a);
    n.b = op(in.b);
    n.c = op(in.c);
    if (in.op == RowOp::kLoad) {
      n.type = NodeType::kLoad;
      n.kind = in_[static_cast<size_t>(in.index)].rowScalar ? Kind::kRow : Kind::kVec;
    } else if (in.op == RowOp::kConst) {
      n.type = NodeType::kConst;
      n.kind = Kind::kUniform;
      n.uniform = in.f0;
    } else if (in.op == RowOp::kStore) {
      n.type = NodeType::kStore;
    } else if (in.op == RowOp::kWhere) {
      n.type = NodeType::kWhere;
      n.kind = std::max({kindOf(n.a), kindOf(n.b), kindOf(n.c)});
    } else if (isBinary(in.op)) {
      n.type = NodeType::kBinary;
      n.kind = std::max(kindOf(n.a), kindOf(n.b));
    } else if (in.op == RowOp::kRotateHalf) {
      if (cols_ % 2 != 0) return unsupported("row kernel: rotate_half of an odd-length row");
      n.type = NodeType::kRotate;
      n.a = materialize(n.a);
      n.kind = Kind::kVec;
    } else if (isReduce(in.op)) {
      n.type = NodeType::kReduce;
      n.a = materialize(n.a);
      n.kind = Kind::kRow;
    } else {
      n.type = NodeType::kUnary;
      n.kind = kindOf(n.a);
    }
    // Constant folding with the scalar semantics (exact for arithmetic; transcendental functions
    // of constants come out correctly rounded).
    if (n.kind == Kind::kUniform && n.type != NodeType::kConst && n.type != NodeType::kStore) {
      auto u = [&](int x) { return nodes_[static_cast<size_t>(x)].uniform; };
      if (n.type == NodeType::kUnary) n.uniform = detail::scalarUnary(n.op, n.f0, n.f1, u(n.a));
      else if (n.type == NodeType::kBinary) n.uniform = detail::scalarBinary(n.op, u(n.a), u(n.b));
      else if (n.type == NodeType::kWhere) n.uniform = u(n.a) != 0.0f ? u(n.b) : u(n.c);
      n.type = NodeType::kConst;
    }
    nodes_.push_back(n);
    map[i] = static_cast<int>(nodes_.size()) - 1;
  }
  // Fuse sum/mean(mul(a, b)) into one pass when the product has no other use (bit-identical: the
  // product is still rounded before it is added).
  std::vector<int> uses(nodes_.size(), 0);
  for (const Node& n : nodes_)
    for (int o : {n.a, n.b, n.c})
      if (o >= 0) ++uses[static_cast<size_t>(o)];
  for (Node& n : nodes_) {
    if (n.type != NodeType::kReduce || (n.op != RowOp::kSum && n.op != RowOp::kMean)) continue;
    Node& m = nodes_[static_cast<size_t>(n.a)];
    if (m.type == NodeType::kBinary && m.op == RowOp::kMul && uses[static_cast<size_t>(n.a)] == 1 &&
        kindOf(m.a) == Kind::kVec && kindOf(m.b) == Kind::kVec) {
      n.a = m.a;
      n.b = m.b;
      m.type = NodeType::kDead;
    }
  }
  // Fuse a vector binary op into the binary op that is its only user: op2(op1(a, b), c) in one
  // pass (e.g. layer norm's (d * rstd) * gamma). Chains pair up greedily in program order.
  for (Node& n : nodes_) {
    if (n.type != NodeType::kBinary || n.kind != Kind::kVec) continue;
    for (int side = 0; side < 2; ++side) {
      const int id = side == 0 ? n.a : n.b;
      Node& m = nodes_[static_cast<size_t>(id)];
      if (m.type != NodeType::kBinary || m.kind != Kind::kVec || uses[static_cast<size_t>(id)] != 1) continue;
      n.type = NodeType::kBinary2;
      n.op2 = n.op;
      n.op = m.op;
      n.swap2 = side == 1;
      n.c = side == 0 ? n.b : n.a;
      n.a = m.a;
      n.b = m.b;
      m.type = NodeType::kDead;
      break;
    }
  }
  return Status::ok();
}

void RowKernelImpl::plan() {
  // Tile geometry: one row chunked along C, or several short rows.
  if (colsPad_ > kChunk / 2) {
    tileRows_ = 1;
    chunk_ = std::min(kChunk, colsPad_);
  } else {
    tileRows_ = std::max<int64_t>(1, std::min(rows_, kChunk / colsPad_));
    chunk_ = colsPad_;
  }
  // f32 dense rows are read in place when a tile's rows are equally spaced in that input.
  for (Node& n : nodes_)
    if (n.type == NodeType::kLoad && n.kind == Kind::kVec) {
      const Binding& b = in_[static_cast<size_t>(n.index)];
      n.view = b.type == ElemType::kF32 && (tileRows_ == 1 || b.linearRows) && b.rowStride % 4 == 0;
    }

  // Steps, in program order, per-row scalar work hoisted in front of the open chunked group.
  int open = -1;  // index of the open chunked step; its tile "pre" step is open - 1
  auto tileStep = [&]() -> Step& {
    if (steps_.empty() || steps_.back().chunked) steps_.push_back(Step{});
    return steps_.back();
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const int id = static_cast<int>(i);
    if (n.type == NodeType::kConst || n.type == NodeType::kDead || n.view) continue;  // no code
    const bool chunked = n.type == NodeType::kStore ||
                         (n.kind == Kind::kVec && n.type != NodeType::kRotate);
    if (chunked) {
      if (open < 0) {
        steps_.push_back(Step{});                  // pre step
        steps_.push_back(Step{true, {}});
        open = static_cast<int>(steps_.size()) - 1;
      }
      steps_[static_cast<size_t>(open)].nodes.push_back(id);
    } else if (n.type == NodeType::kReduce || n.type == NodeType::kRotate) {
      open = -1;
      tileStep().nodes.push_back(id);
    } else if (open >= 0) {
      steps_[static_cast<size_t>(open - 1)].nodes.push_back(id);
    } else {
      tileStep().nodes.push_back(id);
    }
  }
  steps_.erase(std::remove_if(steps_.begin(), steps_.end(), [](const Step& s) { return s.nodes.empty(); }),
               steps_.end());

  // Positions and liveness.
  int pos = 0;
  std::vector<int> stepEnd(steps_.size());
  for (size_t s = 0; s < steps_.size(); ++s) {
    for (int id : steps_[s].nodes) {
      nodes_[static_cast<size_t>(id)].step = static_cast<int>(s);
      nodes_[static_cast<size_t>(id)].pos = pos;
      nodes_[static_cast<size_t>(id)].lastUse = pos;
      ++pos;
    }
    stepEnd[s] = pos - 1;
  }
  for (const Step& st : steps_) {
    for (int id : st.nodes) {
      const Node& u = nodes_[static_cast<size_t>(id)];
      for (int opnd : {u.a, u.b, u.c}) {
        if (opnd < 0) continue;
        Node& v = nodes_[static_cast<size_t>(opnd)];
        if (v.kind == Kind::kUniform || v.view) continue;
        const bool sameStep = v.step == u.step;
        // Read in every chunk of a group it was not defined in: kept live to the group's end.
        // NOTE: conservative. A slot reused inside the group is written chunk by chunk behind
        // the reads at the same columns, so u.pos would do; the group end costs at most a slot.
        const int usePos = (st.chunked && !sameStep) ? stepEnd[static_cast<size_t>(u.step)] : u.pos;
        v.lastUse = std::max(v.lastUse, usePos);
        if (v.kind == Kind::kVec && (!sameStep || u.type == NodeType::kReduce || u.type == NodeType::kRotate))
          v.rowResident = true;
      }
      if (u.type == NodeType::kRotate) nodes_[static_cast<size_t>(id)].rowResident = true;
    }
  }

  // A store whose value is made by a pointwise op of the same chunked group with no other user:
  // the op writes the f32 output row itself (full chunks; the store still copies a partial last
  // chunk from the op's slot).
  std::vector<int> uses(nodes_.size(), 0);
  for (const Step& st : steps_)
    for (int id : st.nodes)
      for (int o : {nodes_[static_cast<size_t>(id)].a, nodes_[static_cast<size_t>(id)].b, nodes_[static_cast<size_t>(id)].c})
        if (o >= 0) ++uses[static_cast<size_t>(o)];
  for (const Step& st : steps_) {
    if (!st.chunked) continue;
    for (int id : st.nodes) {
      Node& n = nodes_[static_cast<size_t>(id)];
      if (n.type != NodeType::kStore) continue;
      Node& v = nodes_[static_cast<size_t>(n.a)];
      const Binding& o = out_[static_cast<size_t>(n.index)];
      const bool pointwise = v.type == NodeType::kUnary || v.type == NodeType::kBinary || v.type == NodeType::kBinary2 ||
                             v.type == NodeType::kWhere || v.type == NodeType::kBroadcast;
      if (pointwise && v.kind == Kind::kVec && v.step == n.step && uses[static_cast<size_t>(n.a)] == 1 &&
          o.type == ElemType::kF32 && (tileRows_ == 1 || o.linearRows) && v.directOut < 0) {
        v.directOut = n.index;
        n.storeFused = true;
      }
    }
  }

  // Slots by linear scan (a value's slot is free again after its last use).
  std::vector<std::vector<int>> release(static_cast<size_t>(pos));
  std::vector<int> freeList[3];
  int count[3] = {0, 0, 0};
  for (const Step& st : steps_) {
    for (int id : st.nodes) {
      Node& n = nodes_[static_cast<size_t>(id)];
      if (n.type != NodeType::kStore) {
        const int pool = n.kind == Kind::kRow ? 2 : (n.rowResident ? 0 : 1);
        if (!freeList[pool].empty()) {
          n.slot = freeList[pool].back();
          freeList[pool].pop_back();
        } else {
          n.slot = count[pool]++;
        }
        release[static_cast<size_t>(n.lastUse)].push_back(id);
      }
      for (int done : release[static_cast<size_t>(n.pos)]) {
        const Node& d = nodes_[static_cast<size_t>(done)];
        freeList[d.kind == Kind::kRow ? 2 : (d.rowResident ? 0 : 1)].push_back(d.slot);
      }
    }
  }
  numRowRes_ = count[0];
  numChunkLoc_ = count[1];
  numScalar_ = count[2];

  numChunks_ = (colsPad_ + chunk_ - 1) / chunk_;
  tiles_ = rows_ == 0 ? 0 : (rows_ + tileRows_ - 1) / tileRows_;
  auto align = [](size_t v) { return (v + 63) / 64 * 64; };
  rowResBytes_ = align(static_cast<size_t>(tileRows_ * colsPad_) * 4);
  chunkBytes_ = align(static_cast<size_t>(tileRows_ * chunk_) * 4);
  scalarBytes_ = align(static_cast<size_t>(roundUp(tileRows_, 8)) * 4);
  offsOff_ = 0;
  idxOff_ = align((in_.size() + out_.size()) * static_cast<size_t>(tileRows_) * 8);
  rowResOff_ = idxOff_ + align(std::max<size_t>(outerSizes_.size(), 1) * 8);
  chunkOff_ = rowResOff_ + rowResBytes_ * static_cast<size_t>(numRowRes_);
  scalarOff_ = chunkOff_ + chunkBytes_ * static_cast<size_t>(numChunkLoc_);
  scratchBytes_ = scalarOff_ + scalarBytes_ * static_cast<size_t>(numScalar_);
}

Status RowKernelImpl::init(const RowProgram& program, const std::vector<TensorDesc>& inputs,
                           const std::vector<TensorDesc>& outputs, const RowKernelOptions& options) {
  VF_RETURN_IF_ERROR(program.validate());
  if (static_cast<int>(inputs.size()) != program.numInputs())
    return invalidArgument("row kernel: the program reads " + std::to_string(program.numInputs()) + " inputs, " +
                           std::to_string(inputs.size()) + " descriptors given");
  if (static_cast<int>(outputs.size()) != program.numOutputs())
    return invalidArgument("row kernel: the program writes " + std::to_string(program.numOutputs()) + " outputs, " +
                           std::to_string(outputs.size()) + " descriptors given");
  isa_ = options.forceScalar || !cpu::hasAvx2Fma()            ? &detail::scalarKernels()
         : !options.forceAvx2 && cpu::hasAvx512()            ? &detail::avx512Kernels()
                                                             : &detail::avx2Kernels();
  VF_RETURN_IF_ERROR(bind(inputs, outputs));
  VF_RETURN_IF_ERROR(buildNodes(program));
  plan();
  norm_ = matchNorm(program);

  // In-place outputs: allowed for an input of the same type and layout whose every read comes
  // before the output's store in the executed order (a copied load reads at its position, an
  // in-place view wherever its users run).
  aliasOk_.assign(out_.size(), std::vector<bool>(in_.size(), false));
  std::vector<int> lastLoad(in_.size(), -1), store(out_.size(), std::numeric_limits<int>::max());
  std::vector<bool> writerReads(out_.size() * in_.size(), false);  // the direct writer itself reads input j
  for (const Node& n : nodes_) {
    if (n.type == NodeType::kLoad && !n.view)
      lastLoad[static_cast<size_t>(n.index)] = std::max(lastLoad[static_cast<size_t>(n.index)], n.pos);
    if (n.type == NodeType::kStore) store[static_cast<size_t>(n.index)] = std::min(store[static_cast<size_t>(n.index)], n.pos);
    if (n.directOut >= 0) store[static_cast<size_t>(n.directOut)] = std::min(store[static_cast<size_t>(n.directOut)], n.pos);
    if (n.pos < 0) continue;
    for (int o : {n.a, n.b, n.c}) {
      if (o < 0) continue;
      const Node& v = nodes_[static_cast<size_t>(o)];
      if (v.view) lastLoad[static_cast<size_t>(v.index)] = std::max(lastLoad[static_cast<size_t>(v.index)], n.pos);
      if (v.view && n.directOut >= 0) writerReads[static_cast<size_t>(n.directOut) * in_.size() + static_cast<size_t>(v.index)] = true;
    }
  }
  for (size_t k = 0; k < out_.size(); ++k)
    for (size_t j = 0; j < in_.size(); ++j)
      // The writer reading the same element it writes (e.g. r = x + r in place) is fine: each
      // vector is loaded before it is stored.
      aliasOk_[k][j] = in_[j].type == out_[k].type && !in_[j].rowScalar && in_[j].effStrides == out_[k].effStrides &&
                       (lastLoad[j] < store[k] || (lastLoad[j] == store[k] && writerReads[k * in_.size() + j]));
  return Status::ok();
}

/// Whether \p program is exactly a layer norm or RMSNorm of one input (NormRow, in either operand
/// order of the commutative ops), with per-column weight and bias, that the ISA can run as one
/// kernel per row: dense rows in and out (f32 or bf16), every instruction part of the pattern.
bool RowKernelImpl::matchNorm(const RowProgram& program) {
  if (isa_->normRow == nullptr || out_.size() != 1 || cols_ < 2) return false;
  const std::vector<RowInstr>& ins = program.instructions();
  int storeAt = -1;
  for (size_t k = 0; k < ins.size(); ++k) {
    if (ins[k].op != RowOp::kStore) continue;
    if (storeAt >= 0) return false;
    storeAt = static_cast<int>(k);
  }
  if (storeAt < 0) return false;
  std::vector<bool> seen(ins.size(), false);
  auto at = [&](int id) -> const RowInstr* {
    if (id < 0 || id >= static_cast<int>(ins.size())) return nullptr;
    seen[static_cast<size_t>(id)] = true;
    return &ins[static_cast<size_t>(id)];
  };
  auto floatType = [](ElemType t) { return t == ElemType::kF32 || t == ElemType::kBF16; };
  // A load of a [C] input the same for every row (a weight or bias): its input number, or -1.
  auto columnLoad = [&](int id) {
    const RowInstr* r = at(id);
    if (r == nullptr || r->op != RowOp::kLoad) return -1;
    const Binding& b = in_[static_cast<size_t>(r->index)];
    const bool perColumn = !b.rowScalar && floatType(b.type) &&
                           std::all_of(b.outer.begin(), b.outer.end(), [](int64_t o) { return o == 0; });
    return perColumn ? r->index : -1;
  };
  // The other operand of commutative \p r when one of them is a column load (*which = its input).
  auto splitColumn = [&](const RowInstr& r, int* which) {
    if ((*which = columnLoad(r.b)) >= 0) return r.a;
    if ((*which = columnLoad(r.a)) >= 0) return r.b;
    return -1;
  };
  detail::NormRow nr;
  int w = -1, b = -1;
  int y = ins[static_cast<size_t>(storeAt)].a;
  const RowInstr* r = at(y);
  if (r && r->op == RowOp::kCastBf16) {
    nr.castEnd = true;
    r = at(y = r->a);
  }
  if (r && r->op == RowOp::kAdd) {
    y = splitColumn(*r, &b);
    if (y < 0) return false;
    r = at(y);
  }
  if (r && r->op == RowOp::kMul) {
    int which = -1;
    const int other = splitColumn(*r, &which);
    if (other >= 0) {
      w = which;
      r = at(y = other);
    }
  }
  if (r && r->op == RowOp::kCastBf16) {
    nr.castMid = true;
    r = at(y = r->a);
  }
  // y = A * rsqrt(mean(P) + eps).
  if (!r || r->op != RowOp::kMul) return false;
  int a = r->a;
  const RowInstr* rs = at(r->b);
  if (!rs || rs->op != RowOp::kRsqrt) {
    a = r->b;
    rs = at(r->a);
  }
  if (!rs || rs->op != RowOp::kRsqrt) return false;
  const RowInstr* sum = at(rs->a);
  if (!sum || sum->op != RowOp::kAdd) return false;
  const RowInstr* eps = at(sum->b);
  int meanId = sum->a;
  if (!eps || eps->op != RowOp::kConst) {
    eps = at(sum->a);
    meanId = sum->b;
  }
  if (!eps || eps->op != RowOp::kConst) return false;
  nr.eps = eps->f0;
  const RowInstr* mean = at(meanId);
  if (!mean || mean->op != RowOp::kMean) return false;
  const RowInstr* sq = at(mean->a);
  if (!sq) return false;
  const bool square = (sq->op == RowOp::kMul && sq->a == sq->b) || sq->op == RowOp::kSquare ||
                      (sq->op == RowOp::kPow && sq->f0 == 2.0f);
  if (!square || sq->a != a) return false;
  // A: x (RMSNorm) or x - mean(x) (layer norm).
  const RowInstr* ai = at(a);
  int xId = a;
  nr.layerNorm = ai && ai->op == RowOp::kSub;
  if (nr.layerNorm) {
    xId = ai->a;
    const RowInstr* m = at(ai->b);
    if (!m || m->op != RowOp::kMean || m->a != xId) return false;
  }
  const RowInstr* x = at(xId);
  if (!x || x->op != RowOp::kLoad) return false;
  const Binding& xb = in_[static_cast<size_t>(x->index)];
  const Binding& ob = out_[0];
  if (xb.rowScalar || !floatType(xb.type) || !xb.linearRows || !ob.linearRows) return false;
  if (x->index == w || x->index == b) return false;
  for (size_t k = 0; k < ins.size(); ++k) {
    if (static_cast<int>(k) != storeAt && !seen[k]) return false;  // an instruction outside the pattern
  }
  nr.xBf16 = xb.type == ElemType::kBF16;
  nr.outBf16 = ob.type == ElemType::kBF16;
  normRow_ = nr;
  normX_ = x->index;
  normW_ = w;
  normB_ = b;
  return true;
}

void RowKernelImpl::runNormRows(const void* const* in, void* const* out, int threads) const {
  // Weight and bias as float32 once per call (bf16 widened exactly, into the calling thread's
  // buffers, kept between calls: no allocation per call), read in place if f32.
  static thread_local std::vector<float> wide[2];
  const float* column[2] = {nullptr, nullptr};
  const int which[2] = {normW_, normB_};
  for (int k = 0; k < 2; ++k) {
    if (which[k] < 0) continue;
    const Binding& b = in_[static_cast<size_t>(which[k])];
    if (b.type == ElemType::kF32) {
      column[k] = static_cast<const float*>(in[which[k]]);
      continue;
    }
    wide[k].resize(static_cast<size_t>(cols_));
    const uint16_t* h = static_cast<const uint16_t*>(in[which[k]]);
    for (int64_t c = 0; c < cols_; ++c) wide[k][static_cast<size_t>(c)] = detail::bf16ToFloat(h[c]);
    column[k] = wide[k].data();
  }
  const char* x = static_cast<const char*>(in[normX_]);
  char* y = static_cast<char*>(out[0]);
  const int64_t xStride = in_[static_cast<size_t>(normX_)].rowStride, yStride = out_[0].rowStride;
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t r = 0; r < rows_; ++r) {
    isa_->normRow(normRow_, x + r * xStride, y + r * yStride, column[0], column[1], cols_);
  }
}

std::string RowKernelImpl::describe() const {
  char buf[256];
  if (norm_) {
    std::snprintf(buf, sizeof buf, "rowwise[%s] %lld x %lld, fused %s row kernel", isa_->name,
                  static_cast<long long>(rows_), static_cast<long long>(cols_), normRow_.layerNorm ? "layer norm" : "RMSNorm");
    return buf;
  }
  std::snprintf(buf, sizeof buf, "rowwise[%s] %lld x %lld, tile %lld row(s) x %lld cols, %zu steps, slots %d+%d+%d, scratch %zu B",
                isa_->name, static_cast<long long>(rows_), static_cast<long long>(cols_),
                static_cast<long long>(tileRows_), static_cast<long long>(chunk_), steps_.size(), numRowRes_,
                numChunkLoc_, numScalar_, scratchBytes_);
  return buf;
}

float loadScalar(ElemType t, const char* p) {
  switch (t) {
    case ElemType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case ElemType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return detail::bf16ToFloat(v);
    }
    case ElemType::kBool: return *reinterpret_cast<const uint8_t*>(p) != 0 ? 1.0f : 0.0f;
  }
  return 0.0f;
}

void RowKernelImpl::runTile(int64_t tile, char* s, const void* const* in, void* const* out) const {
  const int64_t r0 = tile * tileRows_;
  const int64_t nb = std::min(tileRows_, rows_ - r0);
  const size_t nT = out_.size() + in_.size();
  int64_t* offs = reinterpret_cast<int64_t*>(s + offsOff_);  // [tensor][row], outputs first
  int64_t* idx = reinterpret_cast<int64_t*>(s + idxOff_);
  const size_t rank = outerSizes_.size();

  // Row offsets of the tile's rows (odometer over the collapsed outer dims).
  int64_t rem = r0;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rem % outerSizes_[d];
    rem /= outerSizes_[d];
  }
  auto binding = [&](size_t t) -> const Binding& { return t < out_.size() ? out_[t] : in_[t - out_.size()]; };
  for (size_t t = 0; t < nT; ++t) {
    const Binding& b = binding(t);
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d) o += idx[d] * b.outer[d];
    offs[t * static_cast<size_t>(tileRows_)] = o;
  }
  for (int64_t i = 1; i < nb; ++i) {
    size_t d = rank;
    while (d-- > 0) {
      if (++idx[d] < outerSizes_[d]) break;
      idx[d] = 0;
    }
    for (size_t t = 0; t < nT; ++t) {
      const Binding& b = binding(t);
      int64_t o = 0;
      for (size_t e = 0; e < rank; ++e) o += idx[e] * b.outer[e];
      offs[t * static_cast<size_t>(tileRows_) + static_cast<size_t>(i)] = o;
    }
  }
  auto inRowF = [&](int j, int64_t i) {
    return reinterpret_cast<const float*>(static_cast<const char*>(in[j]) +
                                          offs[(out_.size() + static_cast<size_t>(j)) * static_cast<size_t>(tileRows_) + static_cast<size_t>(i)]);
  };
  auto inRow = [&](int j, int64_t i) {
    return static_cast<const char*>(in[j]) + offs[(out_.size() + static_cast<size_t>(j)) * static_cast<size_t>(tileRows_) + static_cast<size_t>(i)];
  };
  auto outRow = [&](int k, int64_t i) {
    return static_cast<char*>(out[k]) + offs[static_cast<size_t>(k) * static_cast<size_t>(tileRows_) + static_cast<size_t>(i)];
  };
  const int64_t nbPad = roundUp(nb, 8);
  const IsaKernels& K = *isa_;

  // Operand of a per-row scalar instruction (one "row" of nbPad values).
  auto scalarSrc = [&](int id) -> Src {
    const Node& v = nodes_[static_cast<size_t>(id)];
    if (v.kind == Kind::kUniform) return {&v.uniform, 0, true};
    return {rowSlot(s, v), 0, false};
  };
  // Operand of a vector instruction over columns [c0, c0 + w).
  auto vecSrc = [&](int id, int64_t c0) -> Src {
    const Node& v = nodes_[static_cast<size_t>(id)];
    if (v.kind == Kind::kUniform) return {&v.uniform, 0, true};
    if (v.kind == Kind::kRow) return {rowSlot(s, v), 1, true};
    if (v.view) return {inRowF(v.index, 0) + c0, in_[static_cast<size_t>(v.index)].rowStride / 4, false, cols_ - c0};
    if (v.rowResident) return {vecBase(s, v) + c0, colsPad_, false};
    return {vecBase(s, v), chunk_, false};
  };
  // Row i of a whole-row vector operand (row-resident slot or in-place view).
  auto rowOf = [&](int id, int64_t i) -> const float* {
    const Node& v = nodes_[static_cast<size_t>(id)];
    return v.view ? inRowF(v.index, i) : vecBase(s, v) + i * colsPad_;
  };
  auto outRowF = [&](int k, int64_t i) { return reinterpret_cast<float*>(outRow(k, i)); };
  // Where node n writes columns [c0, c0 + w); `full`: all of them are inside the row.
  auto vecDst = [&](const Node& n, int64_t c0, int64_t& ld, bool full) {
    if (n.directOut >= 0 && full) {  // a full chunk of an f32 output: write it there
      ld = out_[static_cast<size_t>(n.directOut)].rowStride / 4;
      return outRowF(n.directOut, 0) + c0;
    }
    ld = n.rowResident ? colsPad_ : chunk_;
    return n.rowResident ? vecBase(s, n) + c0 : vecBase(s, n);
  };

  for (const Step& st : steps_) {
    if (!st.chunked) {
      for (int id : st.nodes) {
        const Node& n = nodes_[static_cast<size_t>(id)];
        switch (n.type) {
          case NodeType::kLoad: {
            float* d = rowSlot(s, n);
            for (int64_t i = 0; i < nb; ++i) d[i] = loadScalar(in_[static_cast<size_t>(n.index)].type, inRow(n.index, i));
            for (int64_t i = nb; i < nbPad; ++i) d[i] = 0.0f;
            break;
          }
          case NodeType::kUnary: K.unary(n.op, n.f0, n.f1, rowSlot(s, n), 0, scalarSrc(n.a), 1, nbPad); break;
          case NodeType::kBinary: K.binary(n.op, rowSlot(s, n), 0, scalarSrc(n.a), scalarSrc(n.b), 1, nbPad); break;
          case NodeType::kWhere:
            K.where(rowSlot(s, n), 0, scalarSrc(n.a), scalarSrc(n.b), scalarSrc(n.c), 1, nbPad);
            break;
          case NodeType::kReduce: {
            float* d = rowSlot(s, n);
            if (n.b >= 0) {
              for (int64_t i = 0; i < nb; ++i) d[i] = K.reduceProduct(n.op, rowOf(n.a, i), rowOf(n.b, i), cols_);
            } else {
              for (int64_t i = 0; i < nb; ++i) d[i] = K.reduce(n.op, rowOf(n.a, i), cols_);
            }
            for (int64_t i = nb; i < nbPad; ++i) d[i] = 0.0f;
            break;
          }
          case NodeType::kRotate: {
            float* d = vecBase(s, n);
            for (int64_t i = 0; i < nb; ++i) {
              K.rotateHalf(d + i * colsPad_, rowOf(n.a, i), cols_);
              for (int64_t c = cols_; c < colsPad_; ++c) d[i * colsPad_ + c] = 0.0f;
            }
            break;
          }
          default: break;
        }
      }
      continue;
    }
    for (int64_t ch = 0; ch < numChunks_; ++ch) {
      const int64_t c0 = ch * chunk_;
      const int64_t w = std::min(chunk_, colsPad_ - c0);
      const int64_t valid = std::max<int64_t>(0, std::min(w, cols_ - c0));
      const bool full = valid == w;
      for (int id : st.nodes) {
        const Node& n = nodes_[static_cast<size_t>(id)];
        int64_t ld = 0;
        switch (n.type) {
          case NodeType::kLoad: {
            float* d = vecDst(n, c0, ld, full);
            const ElemType t = in_[static_cast<size_t>(n.index)].type;
            const int64_t es = static_cast<int64_t>(elemSize(t));
            for (int64_t i = 0; i < nb; ++i) K.load(t, d + i * ld, inRow(n.index, i) + c0 * es, valid, w);
            break;
          }
          case NodeType::kStore: {
            if (valid == 0 || (n.storeFused && full)) break;
            const ElemType t = out_[static_cast<size_t>(n.index)].type;
            const int64_t es = static_cast<int64_t>(elemSize(t));
            Src v = vecSrc(n.a, c0);
            for (int64_t i = 0; i < nb; ++i) K.store(t, outRow(n.index, i) + c0 * es, v.p + i * v.ld, v.bcast, valid);
            break;
          }
          case NodeType::kUnary: {
            float* d = vecDst(n, c0, ld, full);
            K.unary(n.op, n.f0, n.f1, d, ld, vecSrc(n.a, c0), nb, w);
            break;
          }
          case NodeType::kBinary: {
            float* d = vecDst(n, c0, ld, full);
            K.binary(n.op, d, ld, vecSrc(n.a, c0), vecSrc(n.b, c0), nb, w);
            break;
          }
          case NodeType::kBinary2: {
            float* d = vecDst(n, c0, ld, full);
            K.binary2(n.op, n.op2, n.swap2, d, ld, vecSrc(n.a, c0), vecSrc(n.b, c0), vecSrc(n.c, c0), nb, w);
            break;
          }
          case NodeType::kWhere: {
            float* d = vecDst(n, c0, ld, full);
            K.where(d, ld, vecSrc(n.a, c0), vecSrc(n.b, c0), vecSrc(n.c, c0), nb, w);
            break;
          }
          case NodeType::kBroadcast: {
            float* d = vecDst(n, c0, ld, full);
            K.copy(d, ld, vecSrc(n.a, c0), nb, w);
            break;
          }
          default: break;
        }
      }
    }
  }
}

Status RowKernelImpl::execute(std::span<const void* const> inputs, std::span<void* const> outputs) const {
  if (inputs.size() != in_.size() || outputs.size() != out_.size())
    return invalidArgument("row kernel: expected " + std::to_string(in_.size()) + " inputs and " +
                           std::to_string(out_.size()) + " outputs");
  if (rows_ == 0 || cols_ == 0) return Status::ok();
  for (const void* p : inputs)
    if (p == nullptr) return invalidArgument("row kernel: null input pointer");
  for (const void* p : outputs)
    if (p == nullptr) return invalidArgument("row kernel: null output pointer");
  auto range = [](const void* p, const Binding& b) {
    const auto base = reinterpret_cast<uintptr_t>(p);
    return std::pair<uintptr_t, uintptr_t>(base + b.lo, base + b.hi);
  };
  auto overlap = [](std::pair<uintptr_t, uintptr_t> x, std::pair<uintptr_t, uintptr_t> y) {
    return x.first < y.second && y.first < x.second;
  };
  for (size_t k = 0; k < out_.size(); ++k) {
    auto ok = range(outputs[k], out_[k]);
    for (size_t l = k + 1; l < out_.size(); ++l)
      if (overlap(ok, range(outputs[l], out_[l])))
        return invalidArgument("row kernel: outputs " + std::to_string(k) + " and " + std::to_string(l) + " overlap");
    for (size_t j = 0; j < in_.size(); ++j) {
      if (!overlap(ok, range(inputs[j], in_[j]))) continue;
      if (outputs[k] != inputs[j] || !aliasOk_[k][j])
        return invalidArgument("row kernel: output " + std::to_string(k) + " overlaps input " + std::to_string(j) +
                               " (only an identical layout read before the store may be written in place)");
    }
  }

  const int maxThreads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t byWork = std::max<int64_t>(1, rows_ * cols_ / kMinElemsPerThread);
  const int threads = static_cast<int>(std::min<int64_t>({maxThreads, byWork, tiles_}));
  const void* const* in = inputs.data();
  void* const* out = outputs.data();
  if (norm_) {
    runNormRows(in, out, threads);
    return Status::ok();
  }
  bool failed = false;
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(|| : failed)
  {
    static thread_local Scratch scratch;
    char* s = scratch.get(scratchBytes_);
    // Every thread reaches the worksharing loop; one without scratch skips its tiles.
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles_; ++t) {
      if (s == nullptr) failed = true;
      else runTile(t, s, in, out);
    }
  }
  if (failed) return internalError("row kernel: scratch allocation failed");
  return Status::ok();
}

}  // namespace

StatusOr<std::unique_ptr<RowKernel>> createRowKernel(const RowProgram& program, const std::vector<TensorDesc>& inputs,
                                                     const std::vector<TensorDesc>& outputs,
                                                     const RowKernelOptions& options) {
  auto k = std::make_unique<RowKernelImpl>();
  VF_RETURN_IF_ERROR(k->init(program, inputs, outputs, options));
  return std::unique_ptr<RowKernel>(std::move(k));
}

}  // namespace verifuse::kernels::rowwise
