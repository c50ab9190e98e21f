// The apps use only diffq's public API (include/diffq/), and that API leaks no internals:
// - every source under apps/ includes, of the project's headers, only "diffq/..." ones (plus its own
//   app-local headers, the standard library, CLI11 and nlohmann-json);
// - every header under include/diffq/ includes only other public headers (no src/ header);
// - an application built against include/ alone (tests/apps/embed/embed_public_api.cpp, its own target
//   without src/ on the include path) loads builtin:flux-small quantized and generates one step.
// The scans read the files under DIFFQ_SOURCE_DIR (diffq_lib's public compile definition).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
const fs::path kRoot = DIFFQ_SOURCE_DIR;

struct Include {
  std::string path;
  bool quoted = false;  // "..." rather than <...>
  int line = 0;
};

std::vector<Include> includes_of(const fs::path& file) {
  static const std::regex re(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  std::vector<Include> out;
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (std::smatch m; std::regex_search(line, m, re)) out.push_back({m[2].str(), m[1].str() == "\"", n});
  return out;
}

std::vector<fs::path> sources_under(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const auto ext = e.path().extension();
    if (e.is_regular_file() && (ext == ".cpp" || ext == ".h" || ext == ".hpp" || ext == ".cc")) out.push_back(e.path());
  }
  return out;
}

// A project header that is not public: it exists under src/ (whatever the brackets), or it is a quoted
// include that is neither "diffq/..." nor an app-local header (next to the including file or in an apps/ folder).
std::string violation(const fs::path& file, const Include& inc, bool allow_local) {
  const bool is_public = inc.path.rfind("diffq/", 0) == 0 && fs::exists(kRoot / "include" / inc.path);
  if (is_public) return "";
  if (fs::exists(kRoot / "src" / inc.path)) return "includes src/" + inc.path;
  // App-local: next to the including file, or in one of the apps' own folders (apps/common, apps/serve: the
  // libraries the apps share; every file under apps/ is scanned by the same rule).
  bool local = fs::exists(file.parent_path() / inc.path);
  for (const auto& d : fs::directory_iterator(kRoot / "apps"))
    local = local || (d.is_directory() && fs::exists(d.path() / inc.path));
  if (inc.quoted && !(allow_local && local))
    return "includes \"" + inc.path + "\", which is not a public diffq/ header";
  return "";
}

std::vector<std::string> violations(const fs::path& dir, bool allow_local) {
  std::vector<std::string> out;
  for (const auto& f : sources_under(dir))
    for (const auto& inc : includes_of(f))
      if (const auto v = violation(f, inc, allow_local); !v.empty())
        out.push_back(fs::relative(f, kRoot).string() + ":" + std::to_string(inc.line) + ": " + v);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

TEST(PublicHeaders, TheScanSeesIncludesAndFlagsInternalOnes) {
  // The scan itself: the CLI's sources are found and their includes parsed, and an internal include is
  // flagged (as a test source of this area has one).
  const auto cli = sources_under(kRoot / "apps" / "cli");
  ASSERT_GE(cli.size(), 10u);
  bool saw_public = false;
  for (const auto& f : cli)
    for (const auto& inc : includes_of(f)) saw_public = saw_public || inc.path == "diffq/pipeline.h";
  EXPECT_TRUE(saw_public);
  const fs::path self = kRoot / "tests" / "apps" / "test_cli_generate.cpp";
  bool flagged = false;
  for (const auto& inc : includes_of(self)) flagged = flagged || !violation(self, inc, true).empty();
  EXPECT_TRUE(flagged) << "test_cli_generate.cpp includes io/png.h, which the scan must flag";
}

TEST(PublicHeaders, AppsIncludeOnlyPublicHeaders) {
  const auto v = violations(kRoot / "apps", /*allow_local=*/true);
  EXPECT_TRUE(v.empty()) << joined(v);
}

TEST(PublicHeaders, PublicHeadersIncludeOnlyPublicHeaders) {
  const auto hs = sources_under(kRoot / "include" / "diffq");
  ASSERT_GE(hs.size(), 10u);
  const auto v = violations(kRoot / "include" / "diffq", /*allow_local=*/false);
  EXPECT_TRUE(v.empty()) << joined(v);
}

TEST(PublicHeaders, AnApplicationBuiltOnTheseHeadersAloneRunsABuiltinPipeline) {
  const std::string cmd = "'" DIFFQ_EMBED_PATH "' '" + (kRoot / "tests" / "fixtures" / "tiny-flux").string() + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_NE(out.find("class FluxPipeline\n"), std::string::npos) << out;
  EXPECT_NE(out.find("latents 1 4 64\n"), std::string::npos) << out;  // 32x32: 2x2 packed tokens of 16 x 4 channels
  EXPECT_NE(out.find("finite 1 steps 1 callbacks 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("quantized gguf gguf_q8_0 bytes"), std::string::npos) << out;
  EXPECT_NE(out.find("bytes 1 dense 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("offload group:2\nbad offload refused\n"), std::string::npos) << out;
  EXPECT_NE(out.find("inspect {\n"), std::string::npos) << out;
  EXPECT_NE(out.find("peak 1\n"), std::string::npos) << out;
}

}  // namespace
