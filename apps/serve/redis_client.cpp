#include "redis_client.h"

#include <hiredis/hiredis.h>

#include <charconv>

#include "diffq/error.h"

namespace diffq::serve {

namespace {
constexpr const char* kCtx = "serve";

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER: out.type = RedisReply::Type::integer, out.integer = r->integer; break;
    case REDIS_REPLY_STRING: out.type = RedisReply::Type::string, out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_STATUS: out.type = RedisReply::Type::status, out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_ERROR: out.type = RedisReply::Type::error, out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::array;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default: out.type = RedisReply::Type::nil;
  }
  return out;
}

[[noreturn]] void unexpected(const char* what, const char* got) {
  throw RedisUnavailable(cat("Redis answered ", got, " where ", what, " was expected"));
}
}  // namespace

RedisUrl RedisUrl::parse(const std::string& text) {
  RedisUrl u;
  u.text = text;
  const std::string scheme = "redis://";
  check(text.rfind(scheme, 0) == 0, kCtx, "queue '", text, "' must be redis://HOST[:PORT][/DB]");
  std::string rest = text.substr(scheme.size());
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), u.db);
      check(ec == std::errc() && p == db.data() + db.size() && u.db >= 0, kCtx, "queue '", text,
            "': the database '", db, "' must be a number >= 0");
    }
  }
  if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), u.port);
    check(ec == std::errc() && p == port.data() + port.size() && u.port > 0 && u.port < 65536, kCtx, "queue '",
          text, "': the port '", port, "' must be 1..65535");
    rest = rest.substr(0, colon);
  }
  check(!rest.empty(), kCtx, "queue '", text, "' names no host (redis://HOST[:PORT][/DB])");
  u.host = rest;
  return u;
}

const std::string& RedisReply::as_string(const char* what) const& { return as_string_checked(what); }
const std::vector<RedisReply>& RedisReply::as_array(const char* what) const& { return as_array_checked(what); }

const std::string& RedisReply::as_string_checked(const char* what) const {
  if (type == Type::string || type == Type::status) return str;
  if (type == Type::error) throw RedisUnavailable(cat("Redis answered an error to ", what, ": ", str));
  unexpected(what, "a non-string");
}

int64_t RedisReply::as_integer(const char* what) const {
  if (type == Type::integer) return integer;
  if (type == Type::error) throw RedisUnavailable(cat("Redis answered an error to ", what, ": ", str));
  unexpected(what, "a non-integer");
}

const std::vector<RedisReply>& RedisReply::as_array_checked(const char* what) const {
  if (type == Type::array) return elements;
  if (type == Type::error) throw RedisUnavailable(cat("Redis answered an error to ", what, ": ", str));
  unexpected(what, "a non-array");
}

RedisConnection::RedisConnection(RedisUrl url) : url_(std::move(url)) {}
RedisConnection::~RedisConnection() { drop(); }

void RedisConnection::drop() {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
  in_transaction_ = false;
}

void RedisConnection::connect() {
  const std::string where = cat("Redis at ", url_.host, ":", url_.port);
  timeval tv{2, 0};
  ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
  if (!ctx_) throw RedisUnavailable(where + " is unreachable: out of memory");
  if (ctx_->err) {
    const std::string why = ctx_->errstr;
    drop();
    throw RedisUnavailable(cat(where, " is unreachable: ", why));
  }
  // Blocking reads (XREADGROUP / XREAD BLOCK) wait at most 5 s; anything longer is a Redis that hangs.
  timeval cmd{10, 0};
  redisSetTimeout(ctx_, cmd);
  if (url_.db != 0) {
    const RedisReply r = command({"SELECT", std::to_string(url_.db)});
    if (r.is_error()) {
      drop();
      throw RedisUnavailable(cat(where, " refused database ", url_.db, ": ", r.str));
    }
  }
}

RedisReply RedisConnection::command(const std::vector<std::string>& args) {
  // A connection kept from before (Redis restarted since, or closed it as idle) fails on first use: that
  // command is sent once more on a fresh connection, except inside WATCH / MULTI, whose state died with it.
  const bool reused = ctx_ != nullptr && !in_transaction_;
  if (!ctx_) connect();
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) argv.push_back(a.data()), lens.push_back(a.size());
  auto* r = static_cast<redisReply*>(redisCommandArgv(ctx_, int(argv.size()), argv.data(), lens.data()));
  if (!r && reused) {
    drop();
    connect();
    r = static_cast<redisReply*>(redisCommandArgv(ctx_, int(argv.size()), argv.data(), lens.data()));
  }
  if (!r) {
    const std::string why = ctx_->errstr[0] ? ctx_->errstr : "the connection failed";
    drop();
    throw RedisUnavailable(cat("Redis at ", url_.host, ":", url_.port, " did not answer ", args.front(), ": ", why));
  }
  const std::string& name = args.front();
  if (name == "WATCH" || name == "MULTI") in_transaction_ = true;
  if (name == "EXEC" || name == "DISCARD" || name == "UNWATCH") in_transaction_ = false;
  RedisReply out = convert(r);
  freeReplyObject(r);
  return out;
}

RedisReply RedisConnection::exec(const std::vector<std::string>& args) {
  RedisReply r = command(args);
  if (r.is_error()) throw RedisUnavailable(cat("Redis answered an error to ", args.front(), ": ", r.str));
  return r;
}

RedisPool::Lease RedisPool::get() {
  std::lock_guard lk(mu_);
  if (idle_.empty()) return Lease(*this, std::make_unique<RedisConnection>(url_));
  auto c = std::move(idle_.back());
  idle_.pop_back();
  return Lease(*this, std::move(c));
}

void RedisPool::give_back(std::unique_ptr<RedisConnection> c) {
  std::lock_guard lk(mu_);
  idle_.push_back(std::move(c));
}

}  // namespace diffq::serve
