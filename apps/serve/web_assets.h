// The web page `diffq serve` serves at "/" (apps/serve/web/: index.html, app.js, style.css), embedded into
// the binary at build time by cmake/embed_web_assets.cmake: no files are read at run time.
#pragma once

#include <span>
#include <string_view>

namespace diffq::serve {

struct WebAsset {
  std::string_view path;     // the URL path: "/", "/index.html", "/app.js", "/style.css"
  std::string_view content;  // the file's bytes (static storage; not NUL-terminated)
  std::string_view mime;     // the Content-Type, e.g. "text/html; charset=utf-8"
};

// The asset served at `path` (a query string or fragment is ignored; "/" is index.html), or nullptr.
const WebAsset* find_web_asset(std::string_view path);

// Every embedded asset ("/" and "/index.html" both appear).
std::span<const WebAsset> web_assets();

}  // namespace diffq::serve
