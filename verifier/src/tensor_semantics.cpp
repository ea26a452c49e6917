// Index-level semantics of small tensors (see tensor_semantics.h).
#include "verifuse/verify/tensor_semantics.h"

#include "verifuse/verify/semantics.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>

namespace verifuse::verify::sem {

int64_t numelOf(const Sizes& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

int64_t ravel(const Index& index, const Sizes& sizes) {
  int64_t flat = 0;
  for (size_t d = 0; d < sizes.size(); ++d) flat = flat * sizes[d] + index[d];
  return flat;
}

Index unravel(int64_t flat, const Sizes& sizes) {
  Index index(sizes.size(), 0);
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = sizes[d] ? flat % sizes[d] : 0;
    flat = sizes[d] ? flat / sizes[d] : 0;
  }
  return index;
}

std::string indexText(const Index& index) {
  std::string s = "[";
  for (size_t d = 0; d < index.size(); ++d) {
    if (d) s += ',';
    s += std::to_string(index[d]);
  }
  s += ']';
  return s;
}

ElementTensor ElementTensor::variables(const std::string& name, Sizes sizes) {
  return ElementTensor(std::move(sizes), [name](const Index& i) { return Expr::var(name + indexText(i)); }, true);
}

ElementTensor ElementTensor::fromFunction(Sizes sizes, ElementFn element, bool contiguous) {
  return ElementTensor(std::move(sizes), std::move(element), contiguous);
}

bool ElementTensor::contains(const Index& index) const {
  if (index.size() != sizes_.size()) return false;
  for (size_t d = 0; d < index.size(); ++d) {
    if (index[d] < 0 || index[d] >= sizes_[d]) return false;
  }
  return true;
}

Expr ElementTensor::at(const Index& index) const {
  if (!contains(index)) std::abort();  // a semantics bug, never data-dependent
  return element_(index);
}

std::vector<Index> ElementTensor::indices() const {
  std::vector<Index> out;
  const int64_t n = numel();
  out.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) out.push_back(unravel(k, sizes_));
  return out;
}

ElementTensor permute(const ElementTensor& t, const std::vector<int64_t>& dims) {
  Sizes sizes(dims.size());
  bool identity = true;
  for (size_t d = 0; d < dims.size(); ++d) {
    sizes[d] = t.sizes()[static_cast<size_t>(dims[d])];
    identity &= dims[d] == static_cast<int64_t>(d);
  }
  return ElementTensor::fromFunction(
      sizes,
      [t, dims](const Index& i) {
        Index src(dims.size());
        for (size_t d = 0; d < dims.size(); ++d) src[static_cast<size_t>(dims[d])] = i[d];
        return t.at(src);
      },
      identity && t.contiguous());
}

ElementTensor reshape(const ElementTensor& t, Sizes sizes) {
  const Sizes from = t.sizes();
  return ElementTensor::fromFunction(sizes, [t, from, sizes](const Index& i) {
    return t.at(unravel(ravel(i, sizes), from));
  });
}

ElementTensor view(const ElementTensor& t, Sizes sizes, const std::string& undefinedName) {
  if (t.contiguous()) return reshape(t, std::move(sizes));
  return ElementTensor::fromFunction(sizes, [undefinedName, sizes](const Index& i) {
    return Expr::var(undefinedName + "[" + std::to_string(ravel(i, sizes)) + "]");
  });
}

ElementTensor clone(const ElementTensor& t) {
  return ElementTensor::fromFunction(t.sizes(), [t](const Index& i) { return t.at(i); });
}

ElementTensor mm(const ElementTensor& a, const ElementTensor& b) {
  const int64_t k = a.sizes()[1];
  return ElementTensor::fromFunction({a.sizes()[0], b.sizes()[1]}, [a, b, k](const Index& i) {
    std::vector<Expr> terms;
    for (int64_t j = 0; j < k; ++j) terms.push_back(a.at({i[0], j}) * b.at({j, i[1]}));
    return sum(terms);
  });
}

ElementTensor addmm(const ElementTensor& bias, const ElementTensor& a, const ElementTensor& b, Expr beta, Expr alpha) {
  ElementTensor product = mm(a, b);
  return ElementTensor::fromFunction(product.sizes(), [bias, product, beta, alpha](const Index& i) {
    return beta * bias.at({i[1]}) + alpha * product.at(i);
  });
}

ElementTensor linear(const ElementTensor& x, const ElementTensor& w, const ElementTensor* bias) {
  Sizes sizes = x.sizes();
  const int64_t k = sizes.back();
  sizes.back() = w.sizes()[0];
  std::optional<ElementTensor> b;
  if (bias) b = *bias;
  return ElementTensor::fromFunction(sizes, [x, w, b, k](const Index& i) {
    Index xi = i;
    const int64_t n = i.back();
    std::vector<Expr> terms;
    for (int64_t j = 0; j < k; ++j) {
      xi.back() = j;
      terms.push_back(x.at(xi) * w.at({n, j}));
    }
    Expr y = sum(terms);
    return b ? y + b->at({n}) : y;
  });
}

ElementTensor convolution1d(const ElementTensor& x, const ElementTensor& w, const ElementTensor* bias,
                            const ConvAttrs& a) {
  const int64_t batch = x.sizes()[0], cin = x.sizes()[1], length = x.sizes()[2];
  const int64_t kernel = w.sizes()[2];
  const int64_t inPerGroup = a.transposed ? cin / a.groups : w.sizes()[1];
  const int64_t outPerGroup = a.transposed ? w.sizes()[1] : w.sizes()[0] / a.groups;
  const int64_t cout = outPerGroup * a.groups;
  const int64_t outLength =
      a.transposed ? (length - 1) * a.stride - 2 * a.padding + a.dilation * (kernel - 1) + a.outputPadding + 1
                   : (length + 2 * a.padding - a.dilation * (kernel - 1) - 1) / a.stride + 1;
  std::optional<ElementTensor> b;
  if (bias) b = *bias;
  return ElementTensor::fromFunction({batch, cout, outLength}, [=](const Index& i) {
    const int64_t n = i[0], o = i[1], q = i[2];
    const int64_t g = o / outPerGroup;
    std::vector<Expr> terms;
    for (int64_t c = 0; c < inPerGroup; ++c) {
      const int64_t channel = g * inPerGroup + c;
      for (int64_t t = 0; t < kernel; ++t) {
        if (!a.transposed) {
          const int64_t pos = q * a.stride - a.padding + t * a.dilation;
          if (pos < 0 || pos >= length) continue;  // zero padding
          terms.push_back(x.at({n, channel, pos}) * w.at({o, c, t}));
        } else {
          // out[q] collects x[p] * W[t] for every p with p*stride - padding + t*dilation == q.
          const int64_t num = q + a.padding - t * a.dilation;
          if (num < 0 || num % a.stride != 0 || num / a.stride >= length) continue;
          terms.push_back(x.at({n, channel, num / a.stride}) * w.at({channel, o % outPerGroup, t}));
        }
      }
    }
    Expr y = sum(terms);
    return b ? y + b->at({o}) : y;
  });
}

ElementTensor bmm(const ElementTensor& a, const ElementTensor& b) {
  const int64_t k = a.sizes()[2];
  return ElementTensor::fromFunction({a.sizes()[0], a.sizes()[1], b.sizes()[2]}, [a, b, k](const Index& i) {
    std::vector<Expr> terms;
    for (int64_t j = 0; j < k; ++j) terms.push_back(a.at({i[0], i[1], j}) * b.at({i[0], j, i[2]}));
    return sum(terms);
  });
}

ElementTensor materialized(const ElementTensor& t) {
  auto table = std::make_shared<std::vector<Expr>>();
  for (const Index& i : t.indices()) table->push_back(t.at(i));
  const Sizes sizes = t.sizes();
  return ElementTensor::fromFunction(
      sizes, [table, sizes](const Index& i) { return (*table)[static_cast<size_t>(ravel(i, sizes))]; }, t.contiguous());
}

ElementTensor mulScalar(const ElementTensor& t, Expr c) {
  return ElementTensor::fromFunction(t.sizes(), [t, c](const Index& i) { return t.at(i) * c; });
}

ElementTensor divScalar(const ElementTensor& t, Expr c) {
  return ElementTensor::fromFunction(t.sizes(), [t, c](const Index& i) { return t.at(i) / c; });
}

namespace {
/// The index of a tensor of \p from broadcast to an index of the (larger-rank) output.
Index broadcastIndex(const Index& out, const Sizes& from) {
  Index i(from.size(), 0);
  const size_t offset = out.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) i[d] = from[d] == 1 ? 0 : out[d + offset];
  return i;
}
}  // namespace

ElementTensor broadcastAdd(const ElementTensor& a, const ElementTensor& b, Expr alpha) {
  const size_t rank = std::max(a.sizes().size(), b.sizes().size());
  Sizes sizes(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    for (const Sizes* s : {&a.sizes(), &b.sizes()}) {
      const size_t offset = rank - s->size();
      if (d >= offset && (*s)[d - offset] != 1) sizes[d] = (*s)[d - offset];
    }
  }
  return ElementTensor::fromFunction(sizes, [a, b, alpha](const Index& i) {
    return a.at(broadcastIndex(i, a.sizes())) + alpha * b.at(broadcastIndex(i, b.sizes()));
  });
}

ElementTensor expand(const ElementTensor& t, Sizes sizes) {
  return ElementTensor::fromFunction(sizes, [t](const Index& i) { return t.at(broadcastIndex(i, t.sizes())); },
                                     /*contiguous=*/sizes == t.sizes() && t.contiguous());
}

ElementTensor softmax(ObligationBuilder& ob, const ElementTensor& t, int64_t dim) {
  const Sizes sizes = t.sizes();
  const size_t d = static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(sizes.size()) : dim);
  auto table = std::make_shared<std::vector<Expr>>(static_cast<size_t>(t.numel()), Expr(0));
  for (const Index& i : t.indices()) {
    if (i[d] != 0) continue;  // one pass per row along dim
    Index j = i;
    std::vector<Expr> row;
    for (int64_t k = 0; k < sizes[d]; ++k) {
      j[d] = k;
      row.push_back(t.at(j));
    }
    // ATen subtracts the row max m first: exp(x_j - m) / Σ exp(x_i - m). Since exp(a - m) =
    // exp(a) / exp(m) (an axiom of exp), m cancels; stating it without the shift keeps the
    // obligation free of max's case splits.
    std::vector<Expr> e;
    for (const Expr& x : row) {
      e.push_back(exp(x));
      ob.assume(e.back() > 0);
    }
    Expr total = sum(e);
    for (int64_t k = 0; k < sizes[d]; ++k) {
      j[d] = k;
      (*table)[static_cast<size_t>(ravel(j, sizes))] = e[static_cast<size_t>(k)] / total;
    }
  }
  return ElementTensor::fromFunction(sizes, [table, sizes](const Index& i) { return (*table)[static_cast<size_t>(ravel(i, sizes))]; });
}

ElementTensor scaledDotProductAttention(ObligationBuilder& ob, const ElementTensor& q, const ElementTensor& k,
                                        const ElementTensor& v, const ElementTensor* mask, Expr scale) {
  // at::_scaled_dot_product_attention_math: attn = softmax(q @ k^T * scale + mask); attn @ v.
  const int64_t b = q.sizes()[0], h = q.sizes()[1], s = q.sizes()[2], d = q.sizes()[3];
  const int64_t kv = k.sizes()[2], dv = v.sizes()[3];
  ElementTensor scores = ElementTensor::fromFunction({b, h, s, kv}, [q, k, d, scale](const Index& i) {
    std::vector<Expr> terms;
    for (int64_t j = 0; j < d; ++j) terms.push_back(q.at({i[0], i[1], i[2], j}) * k.at({i[0], i[1], i[3], j}));
    return sum(terms) * scale;
  });
  if (mask) scores = broadcastAdd(scores, *mask);
  ElementTensor attn = softmax(ob, materialized(scores), -1);
  return materialized(ElementTensor::fromFunction({b, h, s, dv}, [attn, v, kv](const Index& i) {
    std::vector<Expr> terms;
    for (int64_t j = 0; j < kv; ++j) terms.push_back(attn.at({i[0], i[1], i[2], j}) * v.at({i[0], i[1], j, i[3]}));
    return sum(terms);
  }));
}

ElementTensor cat(const std::vector<ElementTensor>& tensors, int64_t dim) {
  Sizes sizes = tensors.front().sizes();
  const size_t d = static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(sizes.size()) : dim);
  std::vector<int64_t> starts;
  sizes[d] = 0;
  for (const ElementTensor& t : tensors) {
    starts.push_back(sizes[d]);
    sizes[d] += t.sizes()[d];
  }
  return ElementTensor::fromFunction(sizes, [tensors, starts, d](const Index& i) {
    size_t p = starts.size() - 1;
    while (i[d] < starts[p]) --p;
    Index j = i;
    j[d] -= starts[p];
    return tensors[p].at(j);
  });
}

ElementTensor slice(const ElementTensor& t, int64_t dim, int64_t start, int64_t end) {
  Sizes sizes = t.sizes();
  const size_t d = static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(sizes.size()) : dim);
  sizes[d] = end - start;
  const bool contiguous = t.contiguous() && (start == 0 && end == t.sizes()[d]);
  return ElementTensor::fromFunction(
      sizes,
      [t, d, start](const Index& i) {
        Index j = i;
        j[d] += start;
        return t.at(j);
      },
      contiguous);
}

void proveElementwise(ObligationBuilder& ob, const std::string& label, const ElementTensor& source,
                      const ElementTensor& target) {
  if (source.sizes() != target.sizes()) {
    const size_t rank = std::max(source.sizes().size(), target.sizes().size());
    for (size_t d = 0; d < rank; ++d) {
      const int64_t s = d < source.sizes().size() ? source.sizes()[d] : 0;
      const int64_t t = d < target.sizes().size() ? target.sizes()[d] : 0;
      ob.prove(label + ".shape[" + std::to_string(d) + "]", Expr(static_cast<long long>(s)),
               Expr(static_cast<long long>(t)));
    }
  }
  for (const Index& i : source.indices()) {
    if (!target.contains(i)) continue;
    ob.prove(label + indexText(i), source.at(i), target.at(i));
  }
}

}  // namespace verifuse::verify::sem
