// The numeric constant folds (see fold_arithmetic.h).
#include "rules/fold_arithmetic.h"

#include <cmath>

namespace verifuse::rules {

ChannelFold batchNormFold(const std::vector<double>& gamma, const std::vector<double>& beta,
                          const std::vector<double>& mean, const std::vector<double>& var, double eps) {
  ChannelFold f;
  if (mean.empty() || var.size() != mean.size()) return f;
  const size_t channels = mean.size();
  f.scale.resize(channels);
  f.shift.resize(channels);
  for (size_t o = 0; o < channels; ++o) {
    const double gm = gamma.empty() ? 1.0 : gamma[o];
    const double bt = beta.empty() ? 0.0 : beta[o];
    const FoldTerms<double> t = batchNormTerms(gm / std::sqrt(var[o] + eps), bt, mean[o]);
    f.scale[o] = t.scale;
    f.shift[o] = t.shift;
  }
  f.biasScale = f.scale;
  return f;
}

ChannelFold channelOpFold(FoldRecord::Kind kind, const std::vector<double>& factors, double alpha) {
  const size_t channels = factors.size();
  ChannelFold f{.scale = std::vector<double>(channels, 1.0),
                .biasScale = std::vector<double>(channels, 1.0),
                .shift = std::vector<double>(channels, 0.0)};
  for (size_t o = 0; o < channels; ++o) {
    FoldTerms<double> t{1.0, 1.0, 0.0};
    switch (kind) {
      case FoldRecord::Kind::kChannelMul: t = channelMulTerms(factors[o], 1.0, 0.0); break;
      case FoldRecord::Kind::kChannelDiv: t = channelDivTerms(factors[o], 1.0, 0.0); break;
      case FoldRecord::Kind::kChannelAdd: t = channelAddTerms(factors[o], alpha, 1.0); break;
      default: break;
    }
    f.scale[o] = t.scale;
    f.biasScale[o] = t.biasScale;
    f.shift[o] = t.shift;
  }
  return f;
}

}  // namespace verifuse::rules
