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
    f.scale[o] = gm / std::sqrt(var[o] + eps);
    f.shift[o] = bt - mean[o] * f.scale[o];
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
    switch (kind) {
      case FoldRecord::Kind::kChannelMul: f.scale[o] = f.biasScale[o] = factors[o]; break;
      case FoldRecord::Kind::kChannelDiv: f.scale[o] = f.biasScale[o] = 1.0 / factors[o]; break;
      case FoldRecord::Kind::kChannelAdd: f.shift[o] = alpha * factors[o]; break;
      default: break;
    }
  }
  return f;
}

}  // namespace verifuse::rules
