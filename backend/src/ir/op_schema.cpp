#include "verifuse/ir/op_schema.h"

#include <stdexcept>
#include <string>

namespace verifuse::ir {

namespace detail {
void operandOfWrongOperator(const Node& n, std::string_view schemaOp) {
  // A programming error (a slot of one operator read on another), not a property of the graph.
  throw std::logic_error("operand of " + n.qualifiedName() + " read with " + std::string(schemaOp) + "'s schema");
}
}  // namespace detail

namespace {

std::vector<std::string_view> splitNames(std::string_view list) {
  std::vector<std::string_view> names;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view name = list.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    names.push_back(name);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return names;
}

}  // namespace

const std::vector<OpSchemaInfo>& opSchemas() {
  static const std::vector<OpSchemaInfo> table = [] {
    std::vector<OpSchemaInfo> rows;
#define VERIFUSE_SCHEMA_ROW_(Name, op, ...) \
  rows.push_back(OpSchemaInfo{Name::kOp, #Name, splitNames(Name::kOperandNames)});
    VERIFUSE_OP_SCHEMAS(VERIFUSE_SCHEMA_ROW_)
#undef VERIFUSE_SCHEMA_ROW_
    return rows;
  }();
  return table;
}

const OpSchemaInfo* findOpSchema(std::string_view op) {
  if (op.empty()) return nullptr;
  for (const OpSchemaInfo& row : opSchemas()) {
    if (row.op == op) return &row;
  }
  return nullptr;
}

std::optional<size_t> operandIndex(const Node& n, std::string_view name) {
  const OpSchemaInfo* schema = findOpSchema(n.op);
  if (!schema) return std::nullopt;
  for (size_t k = 0; k < schema->operands.size(); ++k) {
    if (schema->operands[k] == name) return k;
  }
  return std::nullopt;
}

const Arg* namedOperand(const Node& n, std::string_view name) {
  const auto k = operandIndex(n, name);
  return k && *k < n.args.size() ? &n.args[*k] : nullptr;
}

Arg* namedOperand(Node& n, std::string_view name) {
  const auto k = operandIndex(n, name);
  return k && *k < n.args.size() ? &n.args[*k] : nullptr;
}

const Arg& requiredOperand(const Node& n, std::string_view name) {
  const Arg* a = namedOperand(n, name);
  if (!a) throw std::logic_error(n.qualifiedName() + " has no operand " + std::string(name));
  return *a;
}

Arg& requiredOperand(Node& n, std::string_view name) {
  return const_cast<Arg&>(requiredOperand(static_cast<const Node&>(n), name));
}

const Arg* rowwiseProgram(const Node& n) {
  if (n.op != kRowwiseOp || n.args.empty() || n.args.back().kind != Arg::Kind::String) return nullptr;
  return &n.args.back();
}

std::span<const Arg> rowwiseInputs(const Node& n) {
  if (!rowwiseProgram(n)) return {};
  return std::span<const Arg>(n.args).first(n.args.size() - 1);
}

}  // namespace verifuse::ir
