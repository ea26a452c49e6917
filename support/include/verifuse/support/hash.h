// FNV-1a 64: the one checksum and short-id hash of verifuse's files and cache keys.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace verifuse::support {

/// The standard offset basis 0xcbf29ce484222325. NOTE: verifuse's earlier private copies used
/// 1469598103934665603 (a digit short), which is not FNV-1a; files and keys written with it
/// belong to the previous formats.
inline constexpr uint64_t kFnv1a64Offset = 14695981039346656037ull;

/// FNV-1a 64 over \p bytes, continuing from \p state (pass a previous result to hash several
/// pieces as one string). Any single changed byte changes the result (each step is a bijection).
inline uint64_t fnv1a64(std::string_view bytes, uint64_t state = kFnv1a64Offset) {
  for (unsigned char c : bytes) {
    state ^= c;
    state *= 1099511628211ull;
  }
  return state;
}

/// 16 lowercase hex digits, zero-padded.
inline std::string hex16(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return out;
}

}  // namespace verifuse::support
