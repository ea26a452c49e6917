// Status and StatusOr: errors are values inside verifuse's C++ (no exceptions cross a component).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace verifuse {

/// Error classes. kUnimplemented is oneDNN's "no implementation for this shape": not a bug, the
/// caller falls back to ATen.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kInvalidGraph,
  kUnsupported,
  kUnimplemented,
  kVerifierUnknown,
  kStaleWeights,
  kNotFound,
  kInternal,
  kShapeGuardFailed,  ///< a call's input sizes violate a shape guard the plan added (dynamic shapes)
  kWeightsModified,   ///< a frozen weight was modified in place: the plan can never match it again
  kNeedsExactPlan,    ///< inputs need torch's exact semantics (NaN/Inf) and the fused ops hold only
                      ///< prepacked weights: the caller runs the unfused plan instead
};

const char* statusCodeName(StatusCode code);

/// A success or an error with a message. [[nodiscard]] so an ignored error is a compile warning.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "InvalidGraph: node %3 uses %9 before it is defined"
  std::string toString() const;

  /// Prefixes context ("in pass fold-conv-bn: ") to an error; no-op on success.
  Status withContext(const std::string& context) const {
    if (isOk()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status invalidGraph(std::string m) { return {StatusCode::kInvalidGraph, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status notFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status internalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

/// A value or an error.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}              // NOLINT(implicit)
  StatusOr(Status status) : status_(std::move(status)) {}      // NOLINT(implicit)

  bool isOk() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

inline const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "Ok";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kInvalidGraph: return "InvalidGraph";
    case StatusCode::kUnsupported: return "Unsupported";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kVerifierUnknown: return "VerifierUnknown";
    case StatusCode::kStaleWeights: return "StaleWeights";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kShapeGuardFailed: return "ShapeGuardFailed";
    case StatusCode::kWeightsModified: return "WeightsModified";
    case StatusCode::kNeedsExactPlan: return "NeedsExactPlan";
  }
  return "Unknown";
}

inline std::string Status::toString() const {
  if (isOk()) return "Ok";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

}  // namespace verifuse

#define VF_CONCAT_INNER_(a, b) a##b
#define VF_CONCAT_(a, b) VF_CONCAT_INNER_(a, b)

/// Returns the error of \p expr (a Status) from the enclosing function.
#define VF_RETURN_IF_ERROR(expr)                             \
  do {                                                       \
    ::verifuse::Status vf_status_ = (expr);                  \
    if (!vf_status_.isOk()) return vf_status_;               \
  } while (0)

/// `VF_ASSIGN_OR_RETURN(auto x, f());` unwraps a StatusOr or returns its error.
#define VF_ASSIGN_OR_RETURN(lhs, expr) VF_ASSIGN_OR_RETURN_IMPL_(VF_CONCAT_(vf_or_, __LINE__), lhs, expr)
#define VF_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.isOk()) return tmp.status();           \
  lhs = std::move(tmp).value()
