// Test-only planted bug for the int8 rules (issue 17), in its own header so the rule list's
// header (rules.h) stays as it is.
#pragma once

#include "verifuse/rules/rules.h"

namespace verifuse::rules {

/// int8-conv-dequant's pattern and rewrite with the obligation of an int8 conv that DROPS the
/// source zero point (acc = sum W*x). Its proof is Refuted, so it must never apply.
StatusOr<Rule> plantedInt8DroppedZeroPointRule();

}  // namespace verifuse::rules
