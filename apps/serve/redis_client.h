// A small synchronous Redis client over hiredis: a parsed redis://HOST:PORT[/DB] address, replies as plain
// values, one connection per thread (RedisPool lends them to the HTTP threads). Every failure to reach
// Redis, or a reply that is not what was asked for, is a RedisUnavailable: an HTTP 503 naming Redis and
// the reason, never a library's text in a 500.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "generate_request.h"

struct redisContext;

namespace diffq::serve {

struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string text;  // as given (for messages)
  // redis://HOST[:PORT][/DB]; throws diffq::Error naming the text and what is wrong with it.
  static RedisUrl parse(const std::string& text);
};

// Redis is down, unreachable, or answered something else than asked: 503, field "queue".
class RedisUnavailable : public app::RequestError {
 public:
  explicit RedisUnavailable(const std::string& why) : app::RequestError(503, "queue", why) {}
};

struct RedisReply {
  enum class Type { nil, integer, string, status, array, error } type = Type::nil;
  int64_t integer = 0;
  std::string str;  // string, status, error
  std::vector<RedisReply> elements;
  bool is_nil() const { return type == Type::nil; }
  bool is_error() const { return type == Type::error; }
  // The reply as a string / integer / array; RedisUnavailable ("answered ...") when it is another type.
  // On a temporary (c.exec(...).as_array(...)) they move the value out, so binding the result to a
  // reference or looping over it never reads a destroyed reply.
  const std::string& as_string(const char* what) const&;
  std::string as_string(const char* what) && { return std::move(const_cast<std::string&>(as_string_checked(what))); }
  int64_t as_integer(const char* what) const;
  const std::vector<RedisReply>& as_array(const char* what) const&;
  std::vector<RedisReply> as_array(const char* what) && {
    return std::move(const_cast<std::vector<RedisReply>&>(as_array_checked(what)));
  }

 private:
  const std::string& as_string_checked(const char* what) const;
  const std::vector<RedisReply>& as_array_checked(const char* what) const;
};

class RedisConnection {
 public:
  explicit RedisConnection(RedisUrl url);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends one command (connecting first when not connected) and returns the reply, error replies
  // included. RedisUnavailable when Redis cannot be reached; the connection is then dropped and the next
  // call connects again.
  RedisReply command(const std::vector<std::string>& args);
  // As command(), and an error reply is a RedisUnavailable too.
  RedisReply exec(const std::vector<std::string>& args);
  const RedisUrl& url() const { return url_; }

 private:
  void connect();
  void drop();
  RedisUrl url_;
  redisContext* ctx_ = nullptr;
  bool in_transaction_ = false;  // between WATCH / MULTI and EXEC / DISCARD / UNWATCH
};

// Connections for many threads: each lease is one thread's for as long as it holds it.
class RedisPool {
 public:
  explicit RedisPool(RedisUrl url) : url_(std::move(url)) {}
  class Lease {
   public:
    Lease(RedisPool& p, std::unique_ptr<RedisConnection> c) : pool_(p), c_(std::move(c)) {}
    ~Lease() { pool_.give_back(std::move(c_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    RedisConnection* operator->() { return c_.get(); }
    RedisConnection& operator*() { return *c_; }

   private:
    RedisPool& pool_;
    std::unique_ptr<RedisConnection> c_;
  };
  Lease get();
  const RedisUrl& url() const { return url_; }

 private:
  void give_back(std::unique_ptr<RedisConnection> c);
  RedisUrl url_;
  std::mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
};

}  // namespace diffq::serve
