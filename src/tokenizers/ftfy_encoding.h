// ftfy 6.3's fix_encoding (mojibake repair, default TextFixerConfig), the step of ftfy.fix_text that detects
// text decoded in the wrong single-byte encoding ("cafÃ©") and re-decodes it ("café"):
//   repeat until stable: if the text is not ASCII and ftfy's badness heuristic fires, try each of ftfy's
//   single-byte codecs (latin-1, sloppy-windows-1252/1251/1250/1253/1254/1257, iso-8859-2, macroman, cp437)
//   that can encode it: encode, restore_byte_a0, replace_lossy_sequences (sloppy codecs), decode as UTF-8
//   (utf-8-variants: CESU-8 pairs and C0 80); else decode_inconsistent_utf8 on the detector's matches; else
//   latin-1 -> windows-1252; else fix_c1_controls.
// ftfy's regexes and codec tables come from tools/reference/make_ftfy_tables.py (ftfy_tables.inc), matched by a
// small backtracking matcher with Python's semantics (leftmost match, ordered alternatives, greedy repeats).
#pragma once

#include <string>

namespace diffq::tokenizers {

std::u32string ftfy_fix_encoding(const std::u32string& text);

// ftfy.badness.is_bad: whether the badness heuristic matches anywhere in `text`.
bool ftfy_is_bad(const std::u32string& text);

}  // namespace diffq::tokenizers
