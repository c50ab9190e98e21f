// GET /, /index.html, /app.js, /style.css: the web page (apps/serve/web/), embedded at build time
// (cmake/embed_web_assets.cmake -> diffq_web_assets). It talks to the jobs API only (docs/serve.md,
// "The web page"). Open without the API key: the page asks for the key itself when an API answers 401.
#include <string>

#include "server_state.h"
#include "web_assets.h"

namespace diffq::serve {

void add_page_routes(Server::State& s) {
  for (const WebAsset& a : web_assets()) {
    std::string pattern;  // httplib routes are regular expressions: the path's dots taken literally
    for (const char c : a.path) {
      if (c == '.') pattern += '\\';
      pattern += c;
    }
    s.http.Get(pattern, [&a](const httplib::Request&, httplib::Response& res) {
      res.set_content(a.content.data(), a.content.size(), std::string(a.mime).c_str());
      // The page changes with the binary: revalidate rather than cache a stale app.js across upgrades.
      res.set_header("Cache-Control", "no-cache");
    });
  }
}

}  // namespace diffq::serve
