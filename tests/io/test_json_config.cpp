// JsonConfig (src/io/json_config.h): typed reads of checkpoint configs. Values at the edges of each
// type (integers past int64, floats where an integer belongs, huge floats, nested nulls) are either read
// exactly or refused with an error naming the file, the key and the value; never converted through an
// out-of-range cast (these run under ASan + UBSan in CI).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "diffq/error.h"
#include "io/json_config.h"

using diffq::Error;
using diffq::io::JsonConfig;

namespace {

JsonConfig config(const char* text) { return JsonConfig(nlohmann::json::parse(text), "transformer/config.json"); }

using diffq::testing::error_of;

}  // namespace

TEST(JsonConfig, IntegersAtTheEdgesAreExactOrAClearError) {
  const JsonConfig c = config(R"({"max": 9223372036854775807, "min": -9223372036854775808,
    "too_big": 9223372036854775808, "u64max": 18446744073709551615, "float": 1e30, "half": 2.5,
    "int32": 2147483648, "neg": -3, "null": null, "list": [1, -2, 9223372036854775807], "bad_list": [1, 2.5]})");
  EXPECT_EQ(c.require<int64_t>("max"), INT64_MAX);
  EXPECT_EQ(c.require<int64_t>("min"), INT64_MIN);
  EXPECT_EQ(c.get<int64_t>("neg", 0), -3);
  EXPECT_EQ(c.get<int64_t>("null", 7), 7);  // null takes the default, as Diffusers
  EXPECT_EQ(c.require<std::vector<int64_t>>("list"), (std::vector<int64_t>{1, -2, INT64_MAX}));
  for (const char* key : {"too_big", "u64max", "float", "half"}) {
    const std::string e = error_of([&] { c.require<int64_t>(key); });
    EXPECT_NE(e.find("transformer/config.json"), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find(std::string("'") + key + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("an integer"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { c.require<int>("int32"); }).find("a 32-bit integer"), std::string::npos);
  EXPECT_NE(error_of([&] { c.require<std::vector<int64_t>>("bad_list"); }).find("'bad_list'"), std::string::npos);
  EXPECT_NE(error_of([&] { c.require<int64_t>("missing"); }).find("required key 'missing' is missing"), std::string::npos);
}

TEST(JsonConfig, WrongTypesNameTheValue) {
  const JsonConfig c = config(R"({"s": "x", "b": true, "d": 1.5, "n": 3, "o": {"a": 1}})");
  EXPECT_EQ(c.require<double>("n"), 3.0);  // an integer is a number
  EXPECT_FLOAT_EQ(c.require<float>("d"), 1.5f);
  EXPECT_TRUE(c.require<bool>("b"));
  EXPECT_NE(error_of([&] { c.require<bool>("n"); }).find("expected a boolean"), std::string::npos);
  EXPECT_NE(error_of([&] { c.require<std::string>("d"); }).find("1.5"), std::string::npos);
  EXPECT_NE(error_of([&] { c.require<double>("s"); }).find("\"x\""), std::string::npos);
  EXPECT_NE(error_of([&] { c.require<std::vector<double>>("o"); }).find("expected a list"), std::string::npos);
}
