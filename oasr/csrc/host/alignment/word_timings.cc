#include "alignment/word_timings.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace oasr::alignment {

namespace {

bool is_python_space(uint32_t cp) {
  // The 29 code points for which CPython's str.isspace() is true (bidi class WS, B or S, or
  // category Zs), not ASCII isspace and not std::isspace.
  if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_spaceless(uint32_t cp) {
  return (cp >= 0x1100 && cp <= 0x11FF)      // Hangul Jamo
         || (cp >= 0x3040 && cp <= 0x309F)   // Hiragana
         || (cp >= 0x30A0 && cp <= 0x30FF)   // Katakana
         || (cp >= 0x3130 && cp <= 0x318F)   // Hangul Compatibility Jamo
         || (cp >= 0x31F0 && cp <= 0x31FF)   // Katakana Phonetic Extensions
         || (cp >= 0x3400 && cp <= 0x4DBF)   // CJK Extension A
         || (cp >= 0x4E00 && cp <= 0x9FFF)   // CJK Unified Ideographs
         || (cp >= 0xA960 && cp <= 0xA97F)   // Hangul Jamo Extended-A
         || (cp >= 0xAC00 && cp <= 0xD7AF)   // Hangul Syllables
         || (cp >= 0xD7B0 && cp <= 0xD7FF)   // Hangul Jamo Extended-B
         || (cp >= 0xF900 && cp <= 0xFAFF)   // CJK Compatibility Ideographs
         || (cp >= 0xFF66 && cp <= 0xFF9F)   // Halfwidth Katakana
         || (cp >= 0xFFA0 && cp <= 0xFFDC)   // Halfwidth Hangul
         || (cp >= 0x20000 && cp <= 0x2FA1F)  // CJK Extensions B-F, Compatibility Supplement
         || (cp >= 0x30000 && cp <= 0x323AF);  // CJK Extensions G-H
}

}  // namespace

CharClass classify(uint32_t cp) {
  if (is_python_space(cp)) return kSpace;
  if (is_spaceless(cp)) return kSpaceless;
  return kOther;
}

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    int extra;
    uint32_t cp;
    if (c < 0x80) {
      extra = 0;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      throw std::invalid_argument("malformed UTF-8 in a token piece");
    }
    for (int k = 1; k <= extra; ++k) {
      if (i + k >= n || (p[i + k] & 0xC0) != 0x80) {
        throw std::invalid_argument("malformed UTF-8 in a token piece");
      }
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    out.push_back(cp);
    i += static_cast<std::size_t>(extra) + 1;
  }
  return out;
}

RowTimings word_timings(const std::vector<std::string>& pieces, const double* starts,
                        const double* ends, const double* probs, std::size_t n_tokens,
                        double seconds_per_frame, double offset) {
  if (pieces.size() != n_tokens) {
    throw std::invalid_argument("word_timings: one piece per token is required");
  }
  RowTimings out;
  out.token_starts.reserve(n_tokens);
  double total = 0.0;
  for (std::size_t i = 0; i < n_tokens; ++i) {
    out.token_starts.push_back(starts[i] * seconds_per_frame + offset);
    total += probs[i];
  }
  if (n_tokens > 0) {
    out.confidence = total / static_cast<double>(n_tokens);
    out.has_confidence = true;
  }

  // Code points of the transcript, with each code point's byte offset and owning token.
  std::vector<uint32_t> cps;
  std::vector<std::size_t> byte_at;  // byte offset of code point k (and one past the end)
  std::vector<std::size_t> token_of;
  std::string text;
  for (std::size_t i = 0; i < n_tokens; ++i) {
    const std::vector<uint32_t> piece = decode_utf8(pieces[i]);
    std::size_t b = text.size();
    const auto* bytes = reinterpret_cast<const unsigned char*>(pieces[i].data());
    std::size_t j = 0;
    for (uint32_t cp : piece) {
      cps.push_back(cp);
      byte_at.push_back(b + j);
      token_of.push_back(i);
      const unsigned char c = bytes[j];
      j += c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    }
    text += pieces[i];
  }
  byte_at.push_back(text.size());

  // Words as code-point ranges [a, b).
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  const std::size_t n = cps.size();
  std::size_t run = n;  // start of the open run of kOther code points, n when none
  for (std::size_t k = 0; k < n; ++k) {
    const CharClass c = classify(cps[k]);
    if (c == kOther) {
      if (run == n) run = k;
      continue;
    }
    if (run != n) {
      spans.emplace_back(run, k);
      run = n;
    }
    if (c == kSpaceless) spans.emplace_back(k, k + 1);
  }
  if (run != n) spans.emplace_back(run, n);

  // How many words share each token, and each word's rank among them: a token holding several
  // words (CJK characters in one piece) has its span divided among them in equal parts.
  std::vector<std::size_t> sharing(n_tokens, 0);
  std::vector<std::size_t> first_rank(spans.size()), last_rank(spans.size());
  for (std::size_t w = 0; w < spans.size(); ++w) {
    const std::size_t first = token_of[spans[w].first];
    const std::size_t last = token_of[spans[w].second - 1];
    first_rank[w] = sharing[first];
    last_rank[w] = first == last ? sharing[first] : sharing[last];
    ++sharing[first];
    if (last != first) ++sharing[last];
  }
  auto part = [&](std::size_t t, std::size_t rank, bool at_end) {
    const std::size_t k = rank + (at_end ? 1 : 0);
    if (k == 0) return starts[t];
    if (k == sharing[t]) return ends[t];
    return starts[t] + (ends[t] - starts[t]) / static_cast<double>(sharing[t]) *
                           static_cast<double>(k);
  };

  std::vector<double> w_start(spans.size()), w_end(spans.size());
  std::vector<double> w_len(spans.size());
  for (std::size_t w = 0; w < spans.size(); ++w) {
    const std::size_t a = spans[w].first, b = spans[w].second;
    const std::size_t first = token_of[a];
    const std::size_t last = token_of[b - 1];
    w_start[w] = part(first, first_rank[w], false);
    w_end[w] = part(last, last_rank[w], true);
    w_len[w] = static_cast<double>(b - a);
    // A token owning no code point (an empty piece) cannot overlap the word.
    double acc = 0.0;
    std::size_t count = 0;
    for (std::size_t t = first; t <= last; ++t) {
      if (pieces[t].empty()) continue;
      acc += probs[t];
      ++count;
    }
    out.words.push_back(Word{text.substr(byte_at[a], byte_at[b] - byte_at[a]), 0.0, 0.0,
                             acc / static_cast<double>(count)});
  }

  // Spans in order and disjoint: a word starts no earlier than the previous one ends.
  const std::size_t nw = spans.size();
  for (std::size_t w = 0; w < nw; ++w) {
    if (w > 0 && w_start[w] < w_end[w - 1]) w_start[w] = w_end[w - 1];
    if (w_end[w] < w_start[w]) w_end[w] = w_start[w];
  }
  // No zero-length word: a run of them shares the span of the word after it (before it at the
  // row's end), in proportion to the words' code points; a row with no span at all gets one
  // frame per word.
  for (std::size_t w = 0; w < nw;) {
    if (w_end[w] > w_start[w]) {
      ++w;
      continue;
    }
    std::size_t a = w, b = w;
    while (b < nw && w_end[b] <= w_start[b]) ++b;  // zero-length run [a, b)
    // No donor (every word of the row is zero-length): one frame each, ending where they are
    // (the row's audio may end there), from frame 0 when that is earlier.
    double lo = std::max(0.0, w_start[a] - static_cast<double>(b - a));
    double hi = lo + static_cast<double>(b - a);
    if (b < nw) {  // the donor's span, which the run touches or precedes
      lo = w_start[b];
      hi = w_end[b];
      ++b;
    } else if (a > 0) {
      --a;
      lo = w_start[a];
      hi = w_end[a];
    }
    double letters = 0.0;
    for (std::size_t k = a; k < b; ++k) letters += w_len[k];
    double at = lo;
    for (std::size_t k = a; k < b; ++k) {
      w_start[k] = at;
      at = k + 1 == b ? hi : at + (hi - lo) * w_len[k] / letters;
      w_end[k] = at;
    }
    w = b;
  }
  for (std::size_t w = 0; w < nw; ++w) {
    out.words[w].start = w_start[w] * seconds_per_frame + offset;
    out.words[w].end = w_end[w] * seconds_per_frame + offset;
  }
  return out;
}

}  // namespace oasr::alignment
