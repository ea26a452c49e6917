// Row-engine program text -> RowProgram (see row_program_text.h).
#include "runtime/row_program_text.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace verifuse::runtime {
namespace {

using kernels::rowwise::RowOp;
using kernels::rowwise::RowProgram;
using kernels::rowwise::RowValue;

const std::map<std::string, RowOp>& opsByName() {
  static const std::map<std::string, RowOp> table = [] {
    std::map<std::string, RowOp> t;
    for (int k = 0; k <= static_cast<int>(RowOp::kStore); ++k) {
      const RowOp op = static_cast<RowOp>(k);
      t[kernels::rowwise::rowOpName(op)] = op;
    }
    return t;
  }();
  return table;
}

/// "%12" -> 12, "in3"/"out3" -> 3 (with the given prefix), a float otherwise.
bool parseIndex(const std::string& tok, const char* prefix, int* out) {
  const std::string p(prefix);
  if (tok.compare(0, p.size(), p) != 0 || tok.size() == p.size()) return false;
  char* end = nullptr;
  const long v = std::strtol(tok.c_str() + p.size(), &end, 10);
  if (*end != '\0' || v < 0) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parseFloat(const std::string& tok, float* out) {
  char* end = nullptr;
  *out = std::strtof(tok.c_str(), &end);
  return !tok.empty() && *end == '\0';
}

std::vector<std::string> tokens(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ' ' || c == ',' || c == '\t' || c == '=') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

bool isReduction(RowOp op) {
  return op == RowOp::kSum || op == RowOp::kMean || op == RowOp::kRowMax || op == RowOp::kRowMin;
}
bool isBinaryOp(RowOp op) { return op >= RowOp::kAdd && op <= RowOp::kMin; }

}  // namespace

StatusOr<RowProgram> parseRowProgram(std::string_view text) {
  RowProgram p;
  int lineNo = 0;
  int next = 0;  // the instruction index the next line defines
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++lineNo;
    std::vector<std::string> t = tokens(line);
    if (t.empty()) continue;
    auto bad = [&](const std::string& why) {
      return invalidArgument("row program line " + std::to_string(lineNo) + " '" + std::string(line) + "': " + why);
    };
    auto value = [&](const std::string& tok, RowValue* v) {
      int id = -1;
      if (!parseIndex(tok, "%", &id)) return false;
      v->id = id;
      return true;
    };
    if (t[0] == "store") {
      int out = -1;
      RowValue v;
      if (t.size() != 3 || !parseIndex(t[1], "out", &out) || !value(t[2], &v)) return bad("expected 'store outJ, %V'");
      p.store(out, v);
      ++next;
      continue;
    }
    int id = -1;
    if (t.size() < 2 || !parseIndex(t[0], "%", &id)) return bad("expected '%N = op ...'");
    if (id != next) return bad("value id " + std::to_string(id) + " is not the instruction index " + std::to_string(next));
    auto it = opsByName().find(t[1]);
    if (it == opsByName().end()) return bad("unknown op '" + t[1] + "'");
    const RowOp op = it->second;
    RowValue made;
    std::vector<RowValue> vals;
    std::vector<float> params;
    if (op == RowOp::kLoad) {
      int in = -1;
      if (t.size() != 3 || !parseIndex(t[2], "in", &in)) return bad("expected 'load inK'");
      made = p.load(in);
    } else if (op == RowOp::kConst) {
      float f = 0;
      if (t.size() != 3 || !parseFloat(t[2], &f)) return bad("expected 'const <float>'");
      made = p.constant(f);
    } else {
      for (size_t k = 2; k < t.size(); ++k) {
        RowValue v;
        float f = 0;
        if (value(t[k], &v)) {
          if (!params.empty()) return bad("an operand after a parameter");
          vals.push_back(v);
        } else if (parseFloat(t[k], &f)) {
          params.push_back(f);
        } else {
          return bad("cannot read '" + t[k] + "'");
        }
      }
      if (op == RowOp::kWhere) {
        if (vals.size() != 3 || !params.empty()) return bad("where takes three operands");
        made = p.where(vals[0], vals[1], vals[2]);
      } else if (isBinaryOp(op)) {
        if (vals.size() != 2 || !params.empty()) return bad("a binary op takes two operands");
        made = p.binary(op, vals[0], vals[1]);
      } else if (isReduction(op)) {
        if (vals.size() != 1 || !params.empty()) return bad("a reduction takes one operand");
        made = p.reduce(op, vals[0]);
      } else {
        if (vals.size() != 1 || params.size() > 2) return bad("a unary op takes one operand and at most two parameters");
        made = p.unary(op, vals[0], params.size() > 0 ? params[0] : 0.f, params.size() > 1 ? params[1] : 0.f);
      }
    }
    if (made.id != id) return bad("value numbering out of step");
    ++next;
  }
  VF_RETURN_IF_ERROR(p.validate());
  return p;
}

}  // namespace verifuse::runtime
