// Word timings from token spans: the grouping every decode family shares.
//
// Framework-free: plain C++17, no Python or torch types. The rule, stated once (the Python
// oracle in tests/engine/decode/test_alignment.py states it again, independently):
//   * the transcript is the concatenation of the token pieces (UTF-8);
//   * a word is a maximal run of code points that are neither whitespace (exactly Python's
//     str.isspace) nor of a space-less script (CJK ideographs, kana, Hangul); each space-less
//     code point is a word of its own;
//   * a word's tokens are those whose code points overlap it; it starts where the first of them
//     starts and ends where the last ends, except that a token overlapping k words has its span
//     divided into k equal parts, one per word in order (CJK characters sharing a piece); its
//     confidence is the mean of its tokens' posteriors, accumulated left to right in double
//     precision;
//   * then, in order: a word starting before the previous one ends starts there, and ends no
//     earlier than it starts; a run of zero-length words and the word after it (the word before
//     it when the run ends the row) share that word's span in proportion to their code points
//     (a row whose words are all zero-length gives each one frame, ending where they were, from
//     frame 0 when that is earlier), so no word has zero length;
//   * the utterance confidence is the same mean over every token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace oasr::alignment {

enum CharClass : uint8_t { kOther = 0, kSpace = 1, kSpaceless = 2 };

CharClass classify(uint32_t cp);

struct Word {
  std::string text;
  double start;
  double end;
  double confidence;
};

struct RowTimings {
  std::vector<Word> words;
  std::vector<double> token_starts;  // seconds, one per token
  double confidence = 0.0;           // meaningful only when has_confidence
  bool has_confidence = false;       // false for a row without tokens
};

// starts/ends: per-token span in encoder frames; probs: per-token posterior. Seconds are
// frame * seconds_per_frame + offset.
RowTimings word_timings(const std::vector<std::string>& pieces, const double* starts,
                        const double* ends, const double* probs, std::size_t n_tokens,
                        double seconds_per_frame, double offset);

// Decodes UTF-8 into code points; throws std::invalid_argument on malformed input.
std::vector<uint32_t> decode_utf8(const std::string& s);

}  // namespace oasr::alignment
