// The plan's shape assumptions, read off the planned graph's symbolic sizes (see shape_guards.h).
//
//   positive size                 every symbolic size of a graph input is >= 1
//   convolution window fits       size + 2*pad >= dilation*(k-1) + 1, per spatial dim
//   pooling window fits           the same; ceil_mode counts the last partial window:
//                                 size + 2*pad + stride - 1 >= extent
//   pooling input non-empty       adaptive pooling: the pooled dims are >= 1
//   static channel count          conv: C_in = weight.size(1) * groups; batch norm: C = its stats'
//   static feature count          linear: K = weight.size(1) (addmm: mat1's K = mat2's)
//   matmul inner/batch sizes equal  mm, bmm
//   static normalized size        layer norm: the trailing sizes are the normalized shape
//   view keeps element count      numel before = numel after
//   view merges contiguous dims   each merged dim k: stride[k] = stride[k+1]*size[k+1] or size[k] = 1
//                                 (which dims merge is found on the example sizes, as ATen's
//                                 computeStride groups them)
#include <algorithm>
#include <map>

#include "verifuse/shape_guards/shape_guards.h"

namespace verifuse::shape_guards {
namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::SymExpr;
using Kind = SymExpr::Kind;

/// Rank of a value or constant operand, -1 when unknown.
int rankOf(const Graph& g, const Arg& a) {
  if (a.isValue()) {
    const ir::Value& v = g.value(static_cast<ir::ValueId>(a.i));
    return v.hasShape ? static_cast<int>(v.shape.size()) : -1;
  }
  if (a.isConstant()) return static_cast<int>(g.constants()[static_cast<size_t>(a.i)].sizes.size());
  return -1;
}

/// Size \p k (negative: from the end) of a value or constant operand; invalid when unknown.
SymExpr dimOf(const Graph& g, const Arg& a, int k) {
  const int rank = rankOf(g, a);
  if (rank < 0) return SymExpr();
  if (k < 0) k += rank;
  if (k < 0 || k >= rank) return SymExpr();
  if (a.isValue()) return g.value(static_cast<ir::ValueId>(a.i)).dim(static_cast<size_t>(k));
  return SymExpr::integer(g.constants()[static_cast<size_t>(a.i)].sizes[static_cast<size_t>(k)]);
}

/// An Int operand: a literal, or a value with a known (symbolic) value.
SymExpr intOf(const Graph& g, const Arg& a) {
  if (a.kind == Arg::Kind::Int) return SymExpr::integer(a.i);
  if (a.isValue()) return g.value(static_cast<ir::ValueId>(a.i)).symValue;
  return SymExpr();
}

/// An int list argument spread to \p n entries: a scalar or a 1-list repeats, [] is \p fallback.
std::vector<int64_t> spread(const Arg& a, size_t n, const std::vector<int64_t>& fallback) {
  std::vector<int64_t> v;
  if (a.kind == Arg::Kind::Int) {
    v.assign(n, a.i);
  } else if (auto list = a.asIntList(); list.isOk()) {
    v = *list;
  } else {
    return {};
  }
  if (v.empty()) return fallback;
  if (v.size() == 1) v.assign(n, v[0]);
  return v.size() == n ? v : std::vector<int64_t>{};
}

class Collector {
 public:
  Collector(const Graph& g, const std::map<std::string, int64_t>& examples) : g_(g), examples_(examples) {}

  void add(const std::string& kind, const std::string& node, std::vector<Comparison> alts) {
    for (const Comparison& c : alts) {
      if (!c.lhs.valid() || !c.rhs.valid()) return;  // a size nobody could name: nothing to state
    }
    items_.push_back({kind, node, std::move(alts)});
  }
  void equal(const std::string& kind, const std::string& node, const SymExpr& a, const SymExpr& b) {
    add(kind, node, {{a, Kind::kEq, b}});
  }

  /// One output position at least along each spatial dim (the trailing kernel.size() dims).
  void window(const std::string& node, const char* what, const Arg& x, const std::vector<int64_t>& kernel,
              const std::vector<int64_t>& pad, const std::vector<int64_t>& dilation,
              const std::vector<int64_t>* ceilStrides) {
    const int nsp = static_cast<int>(kernel.size());
    const int rank = rankOf(g_, x);
    if (rank < nsp || pad.size() != kernel.size() || dilation.size() != kernel.size()) return;
    for (int j = 0; j < nsp; ++j) {
      SymExpr size = dimOf(g_, x, rank - nsp + j);
      const int64_t extent = dilation[j] * (kernel[j] - 1) + 1;
      const int64_t slack = 2 * pad[j] + (ceilStrides ? (*ceilStrides)[j] - 1 : 0);
      add(std::string(what) + " window fits", node,
          {{slack ? size + slack : size, Kind::kGe, SymExpr::integer(extent)}});
    }
  }

  void node(const Node& n) {
    const std::string name = n.qualifiedName() + "#" + std::to_string(n.id);
    const std::string& op = n.op;
    const auto& a = n.args;
    if (op == "aten::convolution" || op == "aten::_convolution" || op == "verifuse::conv") {
      const bool fused = op == "verifuse::conv";
      if (a.size() < (fused ? 7u : 9u)) return;
      if (!fused && !(a[6].kind == Arg::Kind::Bool && a[6].i == 0)) return;  // transposed
      const Arg& groupsArg = a[fused ? 6 : 8];
      const int wRank = rankOf(g_, a[1]);
      if (wRank < 3 || groupsArg.kind != Arg::Kind::Int) return;
      const size_t nsp = static_cast<size_t>(wRank - 2);
      std::vector<int64_t> kernel;
      for (int d = 2; d < wRank; ++d) {
        auto k = dimOf(g_, a[1], d).asInt();
        if (!k) return;
        kernel.push_back(*k);
      }
      window(name, "convolution", a[0], kernel, spread(a[4], nsp, std::vector<int64_t>(nsp, 0)),
             spread(a[5], nsp, std::vector<int64_t>(nsp, 1)), nullptr);
      const int rank = rankOf(g_, a[0]);
      const int channelDim = rank == wRank ? 1 : 0;  // unbatched: [C, *spatial]
      equal("static channel count", name, dimOf(g_, a[0], channelDim), dimOf(g_, a[1], 1) * groupsArg.i);
    } else if (op == "aten::max_pool2d_with_indices" || op == "aten::max_pool2d" || op == "aten::avg_pool2d") {
      if (a.size() < 2) return;
      const bool avg = op == "aten::avg_pool2d";
      std::vector<int64_t> kernel = spread(a[1], 2, {});
      if (kernel.empty()) return;
      std::vector<int64_t> stride = a.size() > 2 ? spread(a[2], 2, kernel) : kernel;
      std::vector<int64_t> pad = a.size() > 3 ? spread(a[3], 2, {0, 0}) : std::vector<int64_t>{0, 0};
      std::vector<int64_t> dil = !avg && a.size() > 4 ? spread(a[4], 2, {1, 1}) : std::vector<int64_t>{1, 1};
      const size_t ceilIndex = avg ? 4 : 5;
      const bool ceil = a.size() > ceilIndex && a[ceilIndex].kind == Arg::Kind::Bool && a[ceilIndex].i != 0;
      if (stride.size() != 2) return;
      window(name, "pooling", a[0], kernel, pad, dil, ceil ? &stride : nullptr);
    } else if (op == "aten::_adaptive_avg_pool2d") {
      if (a.empty()) return;
      for (int d : {-2, -1}) add("pooling input non-empty", name, {{dimOf(g_, a[0], d), Kind::kGe, SymExpr::integer(1)}});
    } else if (op == "verifuse::linear") {
      if (a.size() < 2) return;
      equal("static feature count", name, dimOf(g_, a[0], -1), dimOf(g_, a[1], 1));
    } else if (op == "aten::addmm") {
      if (a.size() < 3) return;
      equal("static feature count", name, dimOf(g_, a[1], -1), dimOf(g_, a[2], 0));
    } else if (op == "aten::mm") {
      if (a.size() < 2) return;
      equal("matmul inner sizes equal", name, dimOf(g_, a[0], -1), dimOf(g_, a[1], 0));
    } else if (op == "aten::bmm") {
      if (a.size() < 2) return;
      equal("matmul batch sizes equal", name, dimOf(g_, a[0], 0), dimOf(g_, a[1], 0));
      equal("matmul inner sizes equal", name, dimOf(g_, a[0], 2), dimOf(g_, a[1], 1));
    } else if (op == "aten::_native_batch_norm_legit_no_training" || op == "aten::_batch_norm_no_update" ||
               op == "aten::native_batch_norm") {
      if (a.size() < 4 || rankOf(g_, a[0]) <= 1 || rankOf(g_, a[3]) != 1) return;
      equal("static channel count", name, dimOf(g_, a[0], 1), dimOf(g_, a[3], 0));
    } else if (op == "aten::native_layer_norm") {
      if (a.size() < 2 || a[1].kind != Arg::Kind::List) return;
      const int rank = rankOf(g_, a[0]);
      const int len = static_cast<int>(a[1].list.size());
      if (rank < len) return;
      for (int j = 0; j < len; ++j) {
        equal("static normalized size", name, dimOf(g_, a[0], rank - len + j), intOf(g_, a[1].list[static_cast<size_t>(j)]));
      }
    } else if (op == "aten::view" || op == "aten::_unsafe_view") {
      if (a.size() < 2 || !a[0].isValue() || a[1].kind != Arg::Kind::List) return;
      view(name, g_.value(static_cast<ir::ValueId>(a[0].i)), a[1].list, op == "aten::_unsafe_view");
    }
  }

  void view(const std::string& name, const ir::Value& x, const std::vector<Arg>& sizes, bool unsafe) {
    if (!x.hasShape) return;
    std::vector<SymExpr> old, fresh;
    for (size_t k = 0; k < x.shape.size(); ++k) old.push_back(x.dim(k));
    for (const Arg& s : sizes) fresh.push_back(intOf(g_, s));
    for (const SymExpr& e : fresh) {
      if (!e.valid() || (e.asInt() && *e.asInt() == -1)) return;  // -1: inferred, numel holds by construction
    }
    add("view keeps element count", name, {{ir::product(old), Kind::kEq, ir::product(fresh)}});
    if (unsafe || x.symStrides.size() != old.size()) return;  // _unsafe_view follows a copy
    // Which old dims merge into one new dim (ATen's computeStride grouping), on the example sizes;
    // each merge needs stride[k] == stride[k+1] * size[k+1] (or size[k] == 1).
    std::vector<int64_t> hintOld, hintNew;
    for (const SymExpr& e : old) {
      auto v = example(e);
      if (!v) return;
      hintOld.push_back(*v);
    }
    for (const SymExpr& e : fresh) {
      auto v = example(e);
      if (!v) return;
      hintNew.push_back(*v);
    }
    size_t i = 0, j = 0;
    while (i < old.size() && j < fresh.size()) {
      std::vector<size_t> group{i};
      __int128 po = hintOld[i], pn = hintNew[j];
      while (po != pn && (i + 1 < old.size() || j + 1 < fresh.size())) {
        if (po < pn && i + 1 < old.size()) {
          ++i;
          group.push_back(i);
          po *= hintOld[i];
        } else if (j + 1 < fresh.size()) {
          ++j;
          pn *= hintNew[j];
        } else {
          break;
        }
        if (po > (static_cast<__int128>(1) << 100) || pn > (static_cast<__int128>(1) << 100)) return;
      }
      for (size_t m = 0; m + 1 < group.size(); ++m) {
        const size_t k = group[m];
        if (old[k].asInt() && *old[k].asInt() == 1) continue;
        add("view merges contiguous dims", name,
            {{x.symStrides[k], Kind::kEq, x.symStrides[k + 1] * old[k + 1]}, {old[k], Kind::kEq, SymExpr::integer(1)}});
      }
      ++i;
      ++j;
    }
  }

  std::optional<int64_t> example(const SymExpr& e) const {
    return e.evaluate([&](const std::string& s) -> std::optional<int64_t> {
      auto it = examples_.find(s);
      if (it == examples_.end()) return std::nullopt;
      return it->second;
    });
  }

  struct Item {
    std::string kind, node;
    std::vector<Comparison> alts;
  };
  const std::vector<Item>& items() const { return items_; }

 private:
  const Graph& g_;
  const std::map<std::string, int64_t>& examples_;
  std::vector<Item> items_;
};

bool isStatic(const std::vector<Comparison>& alts) {
  return std::none_of(alts.begin(), alts.end(),
                      [](const Comparison& c) { return c.lhs.hasSymbols() || c.rhs.hasSymbols(); });
}

SymExpr conditionOf(const std::vector<Comparison>& alts) {
  std::vector<SymExpr> parts;
  for (const Comparison& c : alts) parts.push_back(SymExpr::make(c.op, {c.lhs, c.rhs}));
  return parts.size() == 1 ? parts[0] : SymExpr::make(Kind::kOr, parts);
}

std::string stripParens(const std::string& s) {
  if (s.size() >= 2 && s.front() == '(' && s.back() == ')') return s.substr(1, s.size() - 2);
  return s;
}

}  // namespace

std::vector<Assumption> deriveAssumptions(const ir::Graph& plan, const std::map<std::string, int64_t>& examples,
                                          int* staticCount) {
  Collector c(plan, examples);
  for (ir::ValueId in : plan.inputs()) {
    const ir::Value& v = plan.value(in);
    if (v.type != ir::ValueType::Tensor || !v.hasShape) continue;
    for (size_t d = 0; d < v.shape.size(); ++d) {
      SymExpr e = v.dim(d);
      if (e.valid() && e.hasSymbols()) {
        c.add("positive size", v.name + ".size(" + std::to_string(d) + ")", {{e, Kind::kGe, SymExpr::integer(1)}});
      }
    }
  }
  for (const Node& n : plan.nodes()) {
    if (!n.erased) c.node(n);
  }

  std::vector<Assumption> out;
  std::map<std::string, size_t> index;  // condition text -> position in out
  int statics = 0;
  for (const auto& item : c.items()) {
    SymExpr cond = conditionOf(item.alts);
    if (!cond.valid()) continue;
    std::string key = cond.toString();
    if (isStatic(item.alts)) {
      ++statics;
      auto holds = cond.evaluate([](const std::string&) { return std::optional<int64_t>(); });
      if (holds && *holds) continue;  // a static assumption that fails would be a tracing bug
      key = "static:" + key;
    }
    auto [it, fresh] = index.emplace(key, out.size());
    if (fresh) {
      Assumption a;
      a.kind = item.kind;
      a.alternatives = item.alts;
      a.condition = cond;
      a.text = item.alts.size() == 1 ? stripParens(cond.toString()) : cond.toString();
      out.push_back(std::move(a));
    }
    auto& nodes = out[it->second].nodes;
    if (std::find(nodes.begin(), nodes.end(), item.node) == nodes.end()) nodes.push_back(item.node);
  }
  if (staticCount) *staticCount = statics;
  return out;
}

}  // namespace verifuse::shape_guards
