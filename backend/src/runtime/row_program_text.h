// The text of a row-engine program as verifuse::rowwise carries it in the IR (the format of
// kernels::rowwise::RowProgram::toString()), parsed back into a RowProgram. Torch-free.
#pragma once

#include <string_view>

#include "verifuse/kernels/rowwise.h"
#include "verifuse/support/status.h"

namespace verifuse::runtime {

/// Parses \p text ("%1 = load in0", "%2 = mean %1", "store out0, %5", one instruction a line;
/// value ids must be the instruction indices). kInvalidArgument with the line on any error,
/// including a program RowProgram::validate() refuses.
StatusOr<kernels::rowwise::RowProgram> parseRowProgram(std::string_view text);

}  // namespace verifuse::runtime
