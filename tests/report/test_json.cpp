#include <catch2/catch.hpp>

#include <cstdlib>
#include <limits>
#include <sstream>

#include "tessera/report/json.hpp"

namespace test_json {

namespace report = tessera::report;

TEST_CASE("json_writer writes nested objects and arrays compactly", "[report]") {
    std::ostringstream out;
    report::json_writer j(out);
    j.begin_object();
    j.member("ipu", 0).member("name", "stage \"a\"\n").member("ok", true);
    j.key("items").begin_array().value(1).value(-2.5).null().begin_object().end_object().end_array();
    j.key("empty").begin_array().end_array();
    j.end_object();
    CHECK(j.complete());
    CHECK(out.str() == R"({"ipu":0,"name":"stage \"a\"\n","ok":true,"items":[1,-2.5,null,{}],"empty":[]})");
}

TEST_CASE("json_writer doubles round-trip and non-finite become null", "[report]") {
    std::ostringstream out;
    report::json_writer j(out);
    const double third = 1.0 / 3.0;
    j.begin_array().value(third).value(0.1).value(std::numeric_limits<double>::infinity()).value(
        std::numeric_limits<float>::quiet_NaN()).value(std::uint8_t{7}).end_array();
    const std::string s = out.str();
    CHECK(s.substr(s.size() - 17) == ",0.1,null,null,7]");
    CHECK(std::strtod(s.c_str() + 1, nullptr) == third);
}

TEST_CASE("json_writer escapes control characters", "[report]") {
    std::ostringstream out;
    report::json_writer(out).value(std::string("a\x01" "b\\"));
    CHECK(out.str() == R"("a\u0001b\\")");
}

TEST_CASE("json_writer rejects malformed sequences", "[report]") {
    std::ostringstream out;
    report::json_writer j(out);
    j.begin_object();
    REQUIRE_THROWS_AS(j.value(1), report::json_error);        // value without a key
    REQUIRE_THROWS_AS(j.end_array(), report::json_error);     // wrong bracket
    j.key("a");
    REQUIRE_THROWS_AS(j.key("b"), report::json_error);        // two keys in a row
    REQUIRE_THROWS_AS(j.end_object(), report::json_error);    // key without value
    j.value(1).end_object();
    REQUIRE_THROWS_AS(j.value(2), report::json_error);        // second top-level value
}

}  // namespace test_json
