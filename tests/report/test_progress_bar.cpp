#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>
#include <string>

#include "tessera/report/progress_bar.hpp"

namespace test_progress_bar {

namespace report = tessera::report;

TEST_CASE("format_interval matches tqdm's mm:ss and h:mm:ss", "[report]") {
    CHECK(report::format_interval(0) == "00:00");
    CHECK(report::format_interval(2.4) == "00:02");
    CHECK(report::format_interval(62) == "01:02");
    CHECK(report::format_interval(3723) == "1:02:03");
    CHECK(report::format_interval(-1) == "?");
}

TEST_CASE("format_bar fills cells with full and eighth blocks", "[report]") {
    CHECK(report::format_bar(1.0, 4) == "████");
    CHECK(report::format_bar(0.0, 4) == "    ");
    CHECK(report::format_bar(0.5, 4) == "██  ");
    CHECK(report::format_bar(0.5 + 1.0 / 32, 4) == "██▏ ");  // one eighth of a cell more
    CHECK(report::format_bar(2.0, 3) == "███");              // clamped
}

TEST_CASE("format_meter reproduces tqdm's layout", "[report]") {
    CHECK(report::format_meter("Graph compilation", 100, 100, 2.0, 4, {}) ==
          "Graph compilation: 100%|████| 100/100 [00:02<00:00, 50.00it/s]");
    CHECK(report::format_meter("[Epoch 01]", 260, 520, 10.0, 4, {{"Loss", "1.11"}}) ==
          "[Epoch 01]:  50%|██  | 260/520 [00:10<00:10, 26.00it/s, Loss=1.11]");
    CHECK(report::format_meter("", 0, 10, 0.0, 2, {}) == "  0%|  | 0/10 [00:00<?]");
    CHECK(report::format_meter("slow", 1, 4, 4.0, 4, {}) == "slow:  25%|█   | 1/4 [00:04<00:12, 4.00s/it]");
}

TEST_CASE("progress_bar prints one plain line at the end when not on a terminal", "[report]") {
    std::ostringstream out;
    {
        report::progress_bar bar(out, "[Epoch 01]", 8, {.bar_width = 4});
        CHECK_FALSE(bar.in_place());
        for (int i = 0; i < 8; ++i) {
            bar.set_postfix("Loss", 1.0 + i / 100.0, 2);
            bar.update();
        }
        CHECK(out.str().empty());
    }  // the destructor closes
    const std::string s = out.str();
    CHECK(s.find('\r') == std::string::npos);
    CHECK(s.rfind("[Epoch 01]: 100%|████| 8/8 [", 0) == 0);
    CHECK(s.find("Loss=1.07]\n") != std::string::npos);
    CHECK(std::count(s.begin(), s.end(), '\n') == 1);
}

TEST_CASE("progress_bar plain_lines prints intermediate lines without carriage returns", "[report]") {
    std::ostringstream out;
    report::progress_bar bar(out, "load", 100, {.bar_width = 4, .plain_lines = 4});
    for (int i = 0; i < 100; ++i) bar.update();
    bar.close();
    bar.close();  // idempotent
    const std::string s = out.str();
    CHECK(s.find('\r') == std::string::npos);
    CHECK(std::count(s.begin(), s.end(), '\n') == 4);  // 25, 50, 75 and the final line
    CHECK(s.find("load:  25%") != std::string::npos);
    CHECK(s.find("load: 100%") != std::string::npos);
}

TEST_CASE("progress_bar redraws in place with carriage returns when asked", "[report]") {
    std::ostringstream out;
    report::progress_bar bar(out, "Graph compilation", 3, {.bar_width = 3, .redraw = report::redraw_mode::always});
    CHECK(bar.in_place());
    bar.set_postfix("stage", "a much longer postfix");
    bar.update();
    bar.set_postfix("stage", "b");  // shorter: the old text must be blanked
    bar.update(2);
    bar.close();
    const std::string s = out.str();
    CHECK(std::count(s.begin(), s.end(), '\r') == 4);  // initial draw, two updates, close
    CHECK(std::count(s.begin(), s.end(), '\n') == 1);
    CHECK(s.back() == '\n');
    const auto last = s.substr(s.rfind('\r') + 1);
    CHECK(last.rfind("Graph compilation: 100%|███| 3/3 [", 0) == 0);
    CHECK(bar.count() == 3);
}

}  // namespace test_progress_bar
