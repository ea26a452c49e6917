// The post-op string of a fused op: "relu", "clamp(0, 6)", "sum(1),relu" ...
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "verifuse/rules/rules.h"

namespace verifuse::rules {

namespace {

const std::set<std::string>& knownKinds() {
  static const std::set<std::string> kinds = {"relu", "leaky_relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid",
                                              "tanh", "hardswish", "hardsigmoid", "clamp", "elu", "sum"};
  return kinds;
}

size_t expectedParams(const std::string& kind) {
  if (kind == "clamp") return 2;
  if (kind == "leaky_relu" || kind == "elu" || kind == "sum") return 1;
  return 0;
}

/// "sum" takes its scale (verifuse::conv/linear: + scale * residual) or none (verifuse::qconv/
/// qlinear: the residual is dequantized with their own r_scale and r_zp operands).
bool paramsFit(const std::string& kind, size_t n) { return n == expectedParams(kind) || (kind == "sum" && n == 0); }

std::string formatNumber(double v) {
  // %.9g round-trips float32 parameters; infinities print as inf/-inf and parse back with strtod.
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

bool isFusedOp(const ir::Node& n) { return n.op == kConvOp || n.op == kLinearOp; }


std::string formatPostOps(const std::vector<PostOpSpec>& ops) {
  std::string out;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (k) out += ",";
    out += ops[k].kind;
    if (!ops[k].params.empty()) {
      out += "(";
      for (size_t p = 0; p < ops[k].params.size(); ++p) {
        if (p) out += ' ';
        out += formatNumber(ops[k].params[p]);
      }
      out += ")";
    }
  }
  return out;
}

StatusOr<std::vector<PostOpSpec>> parsePostOps(std::string_view text) {
  std::vector<PostOpSpec> ops;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_')) ++pos;
    PostOpSpec op;
    op.kind = std::string(text.substr(start, pos - start));
    if (!knownKinds().count(op.kind)) return invalidArgument("unknown post-op '" + op.kind + "' in \"" + std::string(text) + "\"");
    if (pos < text.size() && text[pos] == '(') {
      size_t close = text.find(')', pos);
      if (close == std::string_view::npos) return invalidArgument("unclosed '(' in post-ops \"" + std::string(text) + "\"");
      std::string params(text.substr(pos + 1, close - pos - 1));
      const char* p = params.c_str();
      while (*p) {
        while (*p == ' ') ++p;
        if (!*p) break;
        char* end = nullptr;
        double v = std::strtod(p, &end);
        if (end == p) return invalidArgument("bad number in post-ops \"" + std::string(text) + "\"");
        op.params.push_back(v);
        p = end;
      }
      pos = close + 1;
    }
    if (!paramsFit(op.kind, op.params.size())) {
      return invalidArgument("post-op " + op.kind + " takes " + std::to_string(expectedParams(op.kind)) + " parameters");
    }
    ops.push_back(std::move(op));
    if (pos < text.size()) {
      if (text[pos] != ',') return invalidArgument("expected ',' in post-ops \"" + std::string(text) + "\"");
      ++pos;
    }
  }
  return ops;
}

StatusOr<std::vector<PostOpSpec>> fusedPostOps(const ir::Node& fused) {
  const ir::Arg* text = ir::namedOperand(fused, "post_ops");
  if (!text || text->kind != ir::Arg::Kind::String) {
    return invalidArgument(fused.qualifiedName() + " has no post_ops operand");
  }
  return parsePostOps(text->s);
}

bool setFusedPostOps(ir::Node& fused, const std::vector<PostOpSpec>& ops) {
  ir::Arg* text = ir::namedOperand(fused, "post_ops");
  if (!text) return false;
  *text = ir::Arg::string(formatPostOps(ops));
  return true;
}

bool hasNoFusedPostOps(const ir::Node& fused) {
  const ir::Arg* text = ir::namedOperand(fused, "post_ops");
  return !text || text->s.empty();
}

}  // namespace verifuse::rules
