// The page embedded by cmake/embed_web_assets.cmake equals the files in apps/serve/web, byte for byte, under
// the URLs and MIME types the server routes; and it loads nothing from elsewhere (no CDN).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "web_assets.h"

namespace fs = std::filesystem;
using diffq::serve::find_web_asset;
using diffq::serve::WebAsset;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const fs::path kWeb = fs::path(DIFFQ_SOURCE_DIR) / "apps/serve/web";

TEST(WebAssets, EmbeddedBytesEqualTheFiles) {
  struct Want {
    const char* file;
    const char* mime;
  };
  for (const Want& w : {Want{"index.html", "text/html"}, Want{"app.js", "text/javascript"},
                        Want{"style.css", "text/css"}}) {
    const std::string url = std::string("/") + w.file;
    const WebAsset* a = find_web_asset(url);
    ASSERT_NE(a, nullptr) << url;
    EXPECT_EQ(a->path, url);
    const std::string disk = read_file(kWeb / w.file);
    ASSERT_FALSE(disk.empty()) << kWeb / w.file;
    EXPECT_EQ(a->content.size(), disk.size()) << url;
    EXPECT_TRUE(a->content == disk) << url << ": the embedded bytes differ from the file (stale build?)";
    EXPECT_EQ(a->mime.substr(0, std::string_view(w.mime).size()), w.mime) << url;
  }
}

TEST(WebAssets, RootIsTheIndexAndUnknownPathsAreNotFound) {
  const WebAsset* root = find_web_asset("/");
  const WebAsset* index = find_web_asset("/index.html");
  ASSERT_NE(root, nullptr);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(root->content.data(), index->content.data());
  EXPECT_EQ(find_web_asset("/app.js?v=2"), find_web_asset("/app.js"));
  EXPECT_EQ(find_web_asset("/?x=1"), root);
  for (const char* bad : {"", "index.html", "/nope.js", "/../CMakeLists.txt", "/web/app.js", "/APP.JS", "/v1/jobs"})
    EXPECT_EQ(find_web_asset(bad), nullptr) << bad;
  EXPECT_EQ(diffq::serve::web_assets().size(), 4u);  // "/", index.html, app.js, style.css
}

// No framework and no CDN: every src / href / url() / import in the page names one of the embedded files,
// or is a data: URL.
TEST(WebAssets, LoadsNothingFromElsewhere) {
  const std::regex ref(R"re((?:src|href)\s*=\s*"([^"]*)"|url\(\s*['"]?([^'")]+)|import\s*\(?\s*['"]([^'"]+))re");
  for (const WebAsset& a : diffq::serve::web_assets()) {
    const std::string text(a.content);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), ref); it != std::sregex_iterator(); ++it) {
      std::string target;
      for (size_t g = 1; g < it->size(); ++g)
        if ((*it)[g].matched) target = (*it)[g].str();
      if (target.rfind("data:", 0) == 0) continue;
      EXPECT_NE(find_web_asset(target), nullptr) << a.path << " refers to " << target;
    }
    EXPECT_EQ(text.find("http://"), std::string::npos) << a.path;
    EXPECT_EQ(text.find("https://"), std::string::npos) << a.path;
  }
}

TEST(WebAssets, PageHasThePhoneViewportAndTheControls) {
  const std::string html(find_web_asset("/")->content);
  EXPECT_NE(html.find(R"(<meta name="viewport" content="width=device-width, initial-scale=1">)"), std::string::npos);
  for (const char* id : {"prompt", "negative_prompt", "model", "width", "height", "steps", "guidance", "seed",
                         "seed-random", "frames", "generate", "jobs", "gallery", "error", "key-dialog"})
    EXPECT_NE(html.find(std::string("id=\"") + id + "\""), std::string::npos) << "no #" << id;
}

}  // namespace
