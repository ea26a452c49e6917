// SMT-LIB v2 reader for shape programs (the subset the PyTorch shape corpus uses, plus a little).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "terms.h"
#include "verifuse/support/status.h"

namespace verifuse::shapes {

struct AssertInfo {
  TermId term;
  int line = 0;
  int column = 0;
  std::string text;        // source text of the (assert ...) command
  std::string definition;  // body of the define-fun the assert names, if it names one
};

struct ParsedProgram {
  TermTable terms;
  std::vector<AssertInfo> asserts;
  std::unordered_map<std::string, Rat> hints;  // (set-info :example-NAME VALUE)
  int check_sats = 0;
};

/// Parses \p text. Errors name the line and column ("line 3, column 9: unknown symbol 'x'").
StatusOr<ParsedProgram> parseSmtLib(std::string_view text);

}  // namespace verifuse::shapes
