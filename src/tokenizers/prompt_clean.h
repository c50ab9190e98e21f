// WanPipeline's prompt cleaning (diffusers 0.42.1 pipelines/wan/pipeline_wan.py prompt_clean):
//   ftfy.fix_text(text)                 (ftfy 6.3, default TextFixerConfig)
//   -> html.unescape(html.unescape(.))  (Python's html module)
//   -> strip()                          (str.isspace characters)
//   -> regex.sub(r"\s+", " ") -> strip() (\s = the Unicode White_Space property, as the `regex` module has it)
//
// ftfy.fix_text is ported step by step for each line (a segment ends after "\n"): unescape_html (only while no
// segment so far contained "<"), fix_encoding (mojibake repair, tokenizers/ftfy_encoding.h), fix_c1_controls,
// fix_latin_ligatures, fix_character_width, uncurl_quotes, fix_line_breaks, remove_terminal_escapes,
// remove_control_chars, NFC (ICU's); repeated until the segment is stable. fix_surrogates has nothing to do on
// valid UTF-8. Not ported: max_decode_length (segments over 1,000,000 code points are split by ftfy).
#pragma once

#include <string>
#include <string_view>

namespace diffq::tokenizers {

// WanPipeline's prompt_clean on UTF-8 text (malformed UTF-8 is an Error).
std::string wan_prompt_clean(std::string_view text);

// ftfy.fix_text with the default configuration.
std::string ftfy_fix_text(std::string_view text);

// Python's html.unescape: numeric references (with the HTML5 replacements for invalid ones) and the HTML5
// named references, including those without ';' and the longest-prefix rule ("&notit;" -> "¬it;").
std::string html_unescape(std::string_view text);

}  // namespace diffq::tokenizers
