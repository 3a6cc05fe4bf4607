// The active tokens of one frame: a hash from search state to token that also keeps its
// elements in one list, in the order Kaldi's HashList keeps them (buckets in the order they were
// first occupied, each bucket's elements in insertion order). The decoder walks that list, so
// keeping Kaldi's order keeps its search (its running cutoffs and tie breaks depend on the
// order) and therefore its result, also where max_active / min_active bind.
// Framework-free C++17.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace oasr::wfst {

struct TokenElem {
  uint64_t key;  // search state: graph state | boosting node << 32
  double cost;   // accumulated cost (graph + acoustic), Kaldi's Token::cost_
  int32_t rec;   // the token's traceback record
  int32_t tail;  // next element of the list, -1 at its end
};

class TokenList {
 public:
  static constexpr int32_t kNone = -1;

  // Empties the hash and hands back the head of the current list (its elements stay valid
  // until released).
  int32_t clear() {
    for (std::size_t b = bucket_list_tail_; b != kNoBucket; b = buckets_[b].prev_bucket) {
      buckets_[b].last = kNone;
    }
    bucket_list_tail_ = kNoBucket;
    const int32_t head = head_;
    head_ = kNone;
    return head;
  }

  int32_t head() const { return head_; }
  std::size_t size() const { return hash_size_; }

  // Only while the hash is empty (right after clear()).
  void set_size(std::size_t size) {
    hash_size_ = size;
    if (size > buckets_.size()) buckets_.resize(size, Bucket{kNoBucket, kNone});
  }

  void release(int32_t e) {
    elems_[static_cast<std::size_t>(e)].tail = free_;
    free_ = e;
  }

  TokenElem& at(int32_t e) { return elems_[static_cast<std::size_t>(e)]; }
  const TokenElem& at(int32_t e) const { return elems_[static_cast<std::size_t>(e)]; }

  // The element of `key`, inserted with (cost, rec) when absent; *inserted says which.
  int32_t insert(uint64_t key, double cost, int32_t rec, bool* inserted) {
    const std::size_t index = static_cast<std::size_t>(key % hash_size_);
    Bucket& bucket = buckets_[index];
    if (bucket.last != kNone) {
      const int32_t stop = elems_[static_cast<std::size_t>(bucket.last)].tail;
      for (int32_t e = bucket_head(bucket); e != stop; e = elems_[static_cast<std::size_t>(e)].tail) {
        if (elems_[static_cast<std::size_t>(e)].key == key) {
          *inserted = false;
          return e;
        }
      }
    }
    const int32_t e = allocate();
    TokenElem& el = elems_[static_cast<std::size_t>(e)];
    el.key = key;
    el.cost = cost;
    el.rec = rec;
    if (bucket.last == kNone) {  // a new bucket goes at the end of the list
      if (bucket_list_tail_ == kNoBucket) {
        head_ = e;
      } else {
        elems_[static_cast<std::size_t>(buckets_[bucket_list_tail_].last)].tail = e;
      }
      el.tail = kNone;
      bucket.last = e;
      bucket.prev_bucket = bucket_list_tail_;
      bucket_list_tail_ = index;
    } else {  // after the bucket's last element
      el.tail = elems_[static_cast<std::size_t>(bucket.last)].tail;
      elems_[static_cast<std::size_t>(bucket.last)].tail = e;
      bucket.last = e;
    }
    *inserted = true;
    return e;
  }

 private:
  static constexpr std::size_t kNoBucket = static_cast<std::size_t>(-1);
  struct Bucket {
    std::size_t prev_bucket;
    int32_t last;
  };

  int32_t bucket_head(const Bucket& bucket) const {
    return bucket.prev_bucket == kNoBucket
               ? head_
               : elems_[static_cast<std::size_t>(buckets_[bucket.prev_bucket].last)].tail;
  }

  int32_t allocate() {
    if (free_ != kNone) {
      const int32_t e = free_;
      free_ = elems_[static_cast<std::size_t>(e)].tail;
      return e;
    }
    elems_.push_back(TokenElem{});
    return static_cast<int32_t>(elems_.size() - 1);
  }

  std::vector<TokenElem> elems_;
  std::vector<Bucket> buckets_;
  int32_t head_ = kNone;
  int32_t free_ = kNone;
  std::size_t bucket_list_tail_ = kNoBucket;
  std::size_t hash_size_ = 0;
};

}  // namespace oasr::wfst
