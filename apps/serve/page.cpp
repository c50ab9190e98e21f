// GET /: the web page. A placeholder until the embedded page (static HTML/CSS/JS, no build step, no CDN)
// replaces this file's index_html(); the page talks to the jobs API only (docs/serve.md).
#include "server_state.h"

namespace diffq::serve {

const std::string& index_html() {
  static const std::string page = R"(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>diffq serve</title></head>
<body><h1>diffq serve</h1>
<p>The web page is not built into this binary yet. The APIs are live: <a href="/v1/models">/v1/models</a>,
<a href="/v1/jobs">/v1/jobs</a>, <a href="/health">/health</a>, <a href="/metrics">/metrics</a>.</p>
</body></html>
)";
  return page;
}

}  // namespace diffq::serve
