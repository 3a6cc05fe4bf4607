// for_each_row's definition (a template, so it lives in a header).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace oasr::ctc {

template <class Fn>
void for_each_row(int64_t rows, int num_threads, Fn&& fn) {
  const int64_t workers = std::min<int64_t>(std::max(num_threads, 1), rows);
  if (workers <= 1) {
    for (int64_t b = 0; b < rows; ++b) fn(b);
    return;
  }
  // Rows differ in length, so threads pull the next row rather than take a fixed share.
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (int64_t b = next++; b < rows; b = next++) {
      try {
        fn(b);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(workers - 1));
  for (int64_t i = 1; i < workers; ++i) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace oasr::ctc
