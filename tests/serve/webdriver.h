// A minimal W3C WebDriver client (https://www.w3.org/TR/webdriver2/) over cpp-httplib: plain HTTP + JSON
// to chromedriver. Enough for the browser test: a session, navigate, find, type, click, run a script,
// take a screenshot. Every call throws std::runtime_error naming the command and WebDriver's error.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace diffq::testing {

using nlohmann::json;

// RFC 4648 base64 (WebDriver's screenshots); throws on a character outside the alphabet.
inline std::vector<uint8_t> base64_decode(const std::string& in) {
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else if (c == '=' || c == '\n' || c == '\r') continue;
    else throw std::runtime_error(std::string("base64: unexpected character '") + c + "'");
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(uint8_t(acc >> bits));
    }
  }
  return out;
}

class WebDriver {
 public:
  static constexpr const char* kElementKey = "element-6066-11e4-a52e-4f735466cecf";

  explicit WebDriver(int port) : http_("127.0.0.1", port) {
    http_.set_read_timeout(120, 0);
    http_.set_connection_timeout(5, 0);
  }
  ~WebDriver() {
    if (!session_.empty()) http_.Delete("/session/" + session_);
  }

  // True once chromedriver answers GET /status with ready: true.
  bool ready() {
    auto r = http_.Get("/status");
    if (!r || r->status != 200) return false;
    const json j = json::parse(r->body, nullptr, false);
    return j.is_object() && j.value("value", json::object()).value("ready", false);
  }

  // POST /session with Chrome's options (`binary`: the browser; `args`: its command line; a phone's screen
  // of `phone_width` x `phone_height` CSS pixels through Chrome's mobile emulation unless 0).
  void new_session(const std::string& binary, const std::vector<std::string>& args, int phone_width = 0,
                   int phone_height = 0) {
    json opts = {{"args", args}};
    if (!binary.empty()) opts["binary"] = binary;
    if (phone_width > 0)
      opts["mobileEmulation"] = {{"deviceMetrics", {{"width", phone_width}, {"height", phone_height}, {"pixelRatio", 1.0},
                                                    {"touch", true}, {"mobile", true}}}};
    const json caps = {{"capabilities", {{"alwaysMatch", {{"browserName", "chrome"}, {"goog:chromeOptions", opts}}}}}};
    const json v = call("POST", "/session", caps);
    session_ = v.at("sessionId").get<std::string>();
  }

  void navigate(const std::string& url) { call("POST", s() + "/url", {{"url", url}}); }

  // The element matching a CSS selector (throws "no such element" when there is none).
  std::string find(const std::string& css) {
    const json v = call("POST", s() + "/element", {{"using", "css selector"}, {"value", css}});
    return v.at(kElementKey).get<std::string>();
  }
  void clear(const std::string& el) { call("POST", s() + "/element/" + el + "/clear", json::object()); }
  void send_keys(const std::string& el, const std::string& text) {
    call("POST", s() + "/element/" + el + "/value", {{"text", text}});
  }
  void click(const std::string& el) { call("POST", s() + "/element/" + el + "/click", json::object()); }
  // Replaces what an input holds with `text`, typed as a user would.
  void type_into(const std::string& css, const std::string& text) {
    const std::string el = find(css);
    clear(el);
    send_keys(el, text);
  }

  // Runs `script` (a function body; `arguments` holds args) in the page and returns its value.
  json execute(const std::string& script, const json& args = json::array()) {
    return call("POST", s() + "/execute/sync", {{"script", script}, {"args", args}});
  }

  // A PNG of the viewport.
  std::vector<uint8_t> screenshot() { return base64_decode(call("GET", s() + "/screenshot", nullptr).get<std::string>()); }

 private:
  std::string s() const { return "/session/" + session_; }

  // One WebDriver command: returns the response's "value", or throws with WebDriver's error and message.
  json call(const std::string& method, const std::string& path, const json& body) {
    httplib::Result r = method == "GET" ? http_.Get(path.c_str())
                                        : http_.Post(path.c_str(), body.dump(), "application/json");
    if (!r) throw std::runtime_error("webdriver " + method + " " + path + ": no answer (" + httplib::to_string(r.error()) + ")");
    const json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("value"))
      throw std::runtime_error("webdriver " + method + " " + path + ": HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 500));
    const json& v = j["value"];
    if (r->status != 200) {
      const std::string err = v.is_object() ? v.value("error", std::string("?")) : std::string("?");
      const std::string msg = v.is_object() ? v.value("message", std::string()) : v.dump();
      throw std::runtime_error("webdriver " + method + " " + path + ": " + err + ": " + msg.substr(0, 800));
    }
    return v;
  }

  httplib::Client http_;
  std::string session_;
};

}  // namespace diffq::testing
