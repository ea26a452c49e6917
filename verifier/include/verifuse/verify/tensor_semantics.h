// Index-level semantics of small tensors with explicit elements: the bounded instantiation of
// rules whose meaning is about indices, shapes and layouts (canonicalization of conv/addmm/mm,
// view collapsing, clone removal). Every index is a concrete integer, so an obligation built from
// these is quantifier-free and its only arithmetic is the ops' own (sums of products): the
// meaning is checked on small concrete shapes, the way TASO validates its axioms.
//
// Layout is modelled only as far as it changes a result: a tensor is either contiguous (row-major
// dense) or not. `view` is defined on a contiguous tensor; on any other layout it is modelled as
// undefined (eager raises for most; the instances used by the rules are ones eager refuses too),
// and an undefined result is a set of fresh unconstrained variables, so no rule can rely on it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "verifuse/verify/obligation.h"

namespace verifuse::verify::sem {

using Index = std::vector<int64_t>;
using Sizes = std::vector<int64_t>;

/// Row-major flat position of \p index in \p sizes, and back.
int64_t ravel(const Index& index, const Sizes& sizes);
Index unravel(int64_t flat, const Sizes& sizes);
int64_t numelOf(const Sizes& sizes);
/// "[0,2,1]"
std::string indexText(const Index& index);

/// A tensor of Real elements given by a function of the index, plus its layout.
class ElementTensor {
 public:
  using ElementFn = std::function<Expr(const Index&)>;

  /// Real variables `name[i,j,...]`, contiguous.
  static ElementTensor variables(const std::string& name, Sizes sizes);
  static ElementTensor fromFunction(Sizes sizes, ElementFn element, bool contiguous = true);

  const Sizes& sizes() const { return sizes_; }
  int64_t numel() const { return numelOf(sizes_); }
  bool contiguous() const { return contiguous_; }
  bool contains(const Index& index) const;
  /// The element at \p index (which must be contained).
  Expr at(const Index& index) const;
  /// Every index, row-major.
  std::vector<Index> indices() const;

 private:
  ElementTensor(Sizes sizes, ElementFn element, bool contiguous)
      : sizes_(std::move(sizes)), element_(std::move(element)), contiguous_(contiguous) {}
  Sizes sizes_;
  ElementFn element_;
  bool contiguous_ = true;
};

// --- layout and shape ops ----------------------------------------------------------------------
/// permute(t, dims): out[i_0..] = t[i at dims^-1]; not contiguous unless dims is the identity.
ElementTensor permute(const ElementTensor& t, const std::vector<int64_t>& dims);
/// The values of reshape / view / _unsafe_view wherever they are defined: t's elements in row-major
/// order laid out in \p sizes (same numel). The result is contiguous (reshape copies when needed).
ElementTensor reshape(const ElementTensor& t, Sizes sizes);
/// view(t, sizes): reshape if t is contiguous; otherwise undefined, i.e. the fresh unconstrained
/// variables `<undefinedName>[k]`.
ElementTensor view(const ElementTensor& t, Sizes sizes, const std::string& undefinedName);
/// clone(t) (memory_format contiguous): the same values, contiguous.
ElementTensor clone(const ElementTensor& t);

// --- matrix products -----------------------------------------------------------------------------
/// aten::mm(a[M,K], b[K,N])[m,n] = Σ_k a[m,k]*b[k,n]
ElementTensor mm(const ElementTensor& a, const ElementTensor& b);
/// aten::addmm(bias[N], a[M,K], b[K,N], beta, alpha)[m,n] = beta*bias[n] + alpha*Σ_k a[m,k]*b[k,n]
ElementTensor addmm(const ElementTensor& bias, const ElementTensor& a, const ElementTensor& b, Expr beta, Expr alpha);
/// aten::linear / verifuse::linear(x[..., K], W[N, K], b[N]?)[..., n] = Σ_k x[..., k]*W[n, k] (+ b[n])
ElementTensor linear(const ElementTensor& x, const ElementTensor& w, const ElementTensor* bias);

/// aten::bmm(a[B,M,K], b[B,K,N])[b,m,n] = Σ_k a[b,m,k]*b[b,k,n]
ElementTensor bmm(const ElementTensor& a, const ElementTensor& b);

// --- pointwise with broadcasting, softmax, attention -----------------------------------------------
/// Every element evaluated once (the result reads a table): keeps the obligations of deep
/// compositions (softmax under bmm) from rebuilding shared subterms.
ElementTensor materialized(const ElementTensor& t);
/// t * c and t / c for a scalar c (mul.Tensor / div.Tensor with a number).
ElementTensor mulScalar(const ElementTensor& t, Expr c);
ElementTensor divScalar(const ElementTensor& t, Expr c);
/// torch's broadcasting a + alpha*b (sizes right-aligned, size-1 dims repeated).
ElementTensor broadcastAdd(const ElementTensor& a, const ElementTensor& b, Expr alpha = 1);
/// expand(t, sizes): size-1 (and new leading) dims repeated.
ElementTensor expand(const ElementTensor& t, Sizes sizes);
/// aten::_softmax(t, dim): ATen computes exp(x_j - m) / Σ_i exp(x_i - m) with m the max over
/// \p dim; with the axiom exp(a - m) = exp(a)/exp(m) the shift cancels, so this states
/// exp(x_j) / Σ_i exp(x_i), exp the `exp` UF. Adds exp(a) > 0 for every exp term it uses (ground
/// instances of ∀a. exp(a) > 0), which makes every denominator provably nonzero.
ElementTensor softmax(ObligationBuilder& ob, const ElementTensor& t, int64_t dim);
/// ATen's reference semantics of scaled dot-product attention (at::_scaled_dot_product_attention_math,
/// which every SDPA kernel implements): softmax(q @ k^T * scale + mask, -1) @ v for q[B,H,S,D],
/// k[B,H,KV,D], v[B,H,KV,Dv], mask broadcastable to [B,H,S,KV] (additive; none when null).
ElementTensor scaledDotProductAttention(ObligationBuilder& ob, const ElementTensor& q, const ElementTensor& k,
                                        const ElementTensor& v, const ElementTensor* mask, Expr scale);
/// cat(tensors, dim) and slice(t, dim, start, end) (step 1).
ElementTensor cat(const std::vector<ElementTensor>& tensors, int64_t dim);
ElementTensor slice(const ElementTensor& t, int64_t dim, int64_t start, int64_t end);

// --- convolution ---------------------------------------------------------------------------------
struct ConvAttrs {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool transposed = false;
  int64_t outputPadding = 0;
};
/// aten::convolution with one spatial dimension: x[N, C_in, L]; W[C_out, C_in/groups, k], or for a
/// transposed convolution W[C_in, C_out/groups, k]; b[C_out]? Zero padding. Channel o of group g
/// reads the input channels g*C_in/groups .. (g+1)*C_in/groups - 1.
ElementTensor convolution1d(const ElementTensor& x, const ElementTensor& w, const ElementTensor* bias,
                            const ConvAttrs& attrs);

// --- goals ----------------------------------------------------------------------------------------
/// Requires source == target elementwise: one goal `<label>[i,j,...]` per index both contain. If
/// the shapes differ (only a mutant's would), goals `<label>.shape[d]` compare the sizes too.
void proveElementwise(ObligationBuilder& ob, const std::string& label, const ElementTensor& source,
                      const ElementTensor& target);

}  // namespace verifuse::verify::sem
