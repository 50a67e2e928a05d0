#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "tessera/report/svg.hpp"

namespace test_svg {

namespace report = tessera::report;

TEST_CASE("svg_canvas writes a standalone document with escaped text", "[report]") {
    report::svg_canvas svg(200, 50);
    svg.rect(1, 2, 30.5, 4, "#4c72b0", "fwd <mb 0>");
    svg.line(0, 10, 200, 10, "black");
    svg.text(5, 40, "IPU \"0\" & co", 10);
    CHECK(svg.elements() == 3);
    const std::string s = svg.str();
    CHECK(s.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200\" height=\"50\" viewBox=\"0 0 200 50\">\n", 0) == 0);
    CHECK(s.find("<rect x=\"1\" y=\"2\" width=\"30.5\" height=\"4\" fill=\"#4c72b0\"><title>fwd &lt;mb 0&gt;</title></rect>") !=
          std::string::npos);
    CHECK(s.find("<line x1=\"0\" y1=\"10\" x2=\"200\" y2=\"10\" stroke=\"black\" stroke-width=\"1\"/>") != std::string::npos);
    CHECK(s.find(">IPU &quot;0&quot; &amp; co</text>") != std::string::npos);
    CHECK(s.substr(s.size() - 7) == "</svg>\n");
}

TEST_CASE("svg_canvas rejects an empty size", "[report]") {
    REQUIRE_THROWS_AS(report::svg_canvas(0, 10), std::invalid_argument);
    REQUIRE_THROWS_WITH(report::svg_canvas(10, -1), Catch::Contains("10 x -1"));
}

}  // namespace test_svg
