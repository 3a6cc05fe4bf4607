// The exported signature table of a kernel library, derived from the launchers' own prototypes.
//
// OASR_EXPORT_SIGNATURES(lib, OASR_SIGNATURE(fn), ...) defines
// `const char* oasr_<lib>_signatures()`, returning "name:code,code,...;" per launcher, where a
// code is the ctypes view of one parameter: ptr (any pointer, the stream included), i32, u32,
// i64, u64, f32, f64. The Python binding's declared argtypes must equal it or loading raises,
// so a launcher and its binding cannot drift apart silently. Host-only C++17.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace oasr::signatures {

template <class T>
inline constexpr bool kUnsupported = false;

template <class T>
constexpr const char* code() {
  if constexpr (std::is_pointer_v<T>) {
    return "ptr";
  } else if constexpr (std::is_same_v<T, float>) {
    return "f32";
  } else if constexpr (std::is_same_v<T, double>) {
    return "f64";
  } else if constexpr (std::is_integral_v<T> && sizeof(T) == 4) {
    return std::is_signed_v<T> ? "i32" : "u32";
  } else if constexpr (std::is_integral_v<T> && sizeof(T) == 8) {
    return std::is_signed_v<T> ? "i64" : "u64";
  } else {
    static_assert(kUnsupported<T>, "a launcher parameter must be a pointer, a 32/64-bit "
                                   "integer, float or double");
    return "";
  }
}

template <class R, class... Args>
std::string entry(const char* name, R (*)(Args...)) {
  static_assert(std::is_same_v<R, int>, "a launcher returns its cudaError_t as int");
  const char* codes[] = {code<Args>()..., nullptr};
  std::string out = name;
  out += ':';
  for (int i = 0; codes[i] != nullptr; ++i) {
    if (i > 0) out += ',';
    out += codes[i];
  }
  return out;
}

template <class... Entries>
std::string table(const Entries&... entries) {
  std::string out;
  ((out += entries, out += ';'), ...);
  return out;
}

}  // namespace oasr::signatures

#define OASR_SIGNATURE(fn) ::oasr::signatures::entry(#fn, &fn)

#define OASR_EXPORT_SIGNATURES(lib, ...)                                             \
  extern "C" __attribute__((visibility("default"))) const char* oasr_##lib##_signatures() { \
    static const std::string table = ::oasr::signatures::table(__VA_ARGS__);         \
    return table.c_str();                                                             \
  }
