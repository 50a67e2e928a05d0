#include <catch2/catch.hpp>

#include <stdexcept>

#include "tessera/report/table.hpp"

namespace test_table {

namespace report = tessera::report;

TEST_CASE("table aligns text left and numbers right", "[report]") {
    report::table t({"IPU", "item", "MB"});
    t.add_row({"0", "weights", "12.5"});
    t.add_row({"1", "activation stash", "3"});
    CHECK(t.rows() == 2);
    CHECK(t.columns() == 3);
    CHECK(t.str() ==
          "IPU  item                MB\n"
          "---  ----------------  ----\n"
          "  0  weights           12.5\n"
          "  1  activation stash     3\n");
}

TEST_CASE("table counts UTF-8 code points and honours set_align", "[report]") {
    report::table t({"unit", "value"});
    t.add_row({"µs", "1"});
    t.set_align(1, report::align::left);
    CHECK(t.str() ==
          "unit  value\n"
          "----  -----\n"
          "µs    1\n");
}

TEST_CASE("table rejects rows of the wrong width and names both counts", "[report]") {
    report::table t({"a", "b"});
    REQUIRE_THROWS_AS(t.add_row({"1"}), std::invalid_argument);
    REQUIRE_THROWS_WITH(t.add_row({"1", "2", "3"}), Catch::Contains("3 cells") && Catch::Contains("has 2"));
    REQUIRE_THROWS_AS(t.set_align(2, report::align::left), std::out_of_range);
    REQUIRE_THROWS_AS(report::table({}), std::invalid_argument);
}

}  // namespace test_table
