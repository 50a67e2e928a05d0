#pragma once
// A streaming JSON writer: objects, arrays, strings and numbers, with checked nesting.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tessera::report {

/// Misuse of json_writer (a value where a key is due, unbalanced end_*, ...).
class json_error : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

/// Writes compact JSON to a stream as it goes. Doubles use the shortest round-trip form
/// (17 significant digits at most); NaN and infinities become null (JSON has no such numbers).
/// @code
///   report::json_writer j(out);
///   j.begin_object();
///   j.key("ipu").value(0);
///   j.key("items").begin_array().value("weights").end_array();
///   j.end_object();           // {"ipu":0,"items":["weights"]}
/// @endcode
class json_writer {
public:
    explicit json_writer(std::ostream& out) : m_out(&out) {}

    json_writer& begin_object() { open('{', frame::object); return *this; }
    json_writer& end_object() { close('}', frame::object); return *this; }
    json_writer& begin_array() { open('[', frame::array); return *this; }
    json_writer& end_array() { close(']', frame::array); return *this; }

    json_writer& key(std::string_view k) {
        if (m_stack.empty() || m_stack.back().kind != frame::object || m_stack.back().expect_value)
            throw json_error("tessera::report::json_writer::key(\"" + std::string(k) +
                             "\"): a key is only allowed directly inside an object, before its value");
        if (m_stack.back().count++ > 0) *m_out << ',';
        write_string(k);
        *m_out << ':';
        m_stack.back().expect_value = true;
        return *this;
    }

    json_writer& value(std::string_view s) { before_value(); write_string(s); return *this; }
    json_writer& value(const char* s) { return value(std::string_view(s)); }
    json_writer& value(const std::string& s) { return value(std::string_view(s)); }
    json_writer& value(bool b) { before_value(); *m_out << (b ? "true" : "false"); return *this; }
    json_writer& null() { before_value(); *m_out << "null"; return *this; }
    /// Text that is already JSON, written as the next value as it is (the caller vouches for it;
    /// inside an array, comma-separated values are several).
    json_writer& raw(std::string_view json) { before_value(); *m_out << json; return *this; }

    template <class T>
        requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
    json_writer& value(T v) {
        before_value();
        if constexpr (std::is_integral_v<T>) {
            *m_out << +v;
        } else {
            write_double(static_cast<double>(v));
        }
        return *this;
    }

    /// key(k).value(v) in one call.
    template <class T>
    json_writer& member(std::string_view k, const T& v) {
        key(k);
        return value(v);
    }

    /// True once the top-level value is complete.
    [[nodiscard]] bool complete() const noexcept { return m_stack.empty() && m_top_written; }

private:
    struct frame {
        enum kind_t { object, array } kind;
        std::size_t count = 0;
        bool expect_value = false;
    };

    void before_value() {
        if (m_stack.empty()) {
            if (m_top_written) throw json_error("tessera::report::json_writer: a second top-level value");
            m_top_written = true;
            return;
        }
        auto& f = m_stack.back();
        if (f.kind == frame::object) {
            if (!f.expect_value) throw json_error("tessera::report::json_writer: a value inside an object needs a key");
            f.expect_value = false;
        } else if (f.count++ > 0) {
            *m_out << ',';
        }
    }
    void open(char c, frame::kind_t kind) {
        before_value();
        *m_out << c;
        m_stack.push_back(frame{kind});
    }
    void close(char c, frame::kind_t kind) {
        if (m_stack.empty() || m_stack.back().kind != kind || m_stack.back().expect_value)
            throw json_error(std::string("tessera::report::json_writer: unbalanced '") + c + "'");
        m_stack.pop_back();
        *m_out << c;
    }
    void write_double(double v) {
        if (!std::isfinite(v)) { *m_out << "null"; return; }
        char buffer[32];
        for (int precision = 15; precision <= 17; ++precision) {
            std::snprintf(buffer, sizeof buffer, "%.*g", precision, v);
            if (std::strtod(buffer, nullptr) == v) break;
        }
        *m_out << buffer;
    }
    void write_string(std::string_view s) {
        *m_out << '"';
        for (unsigned char c : s) {
            switch (c) {
                case '"': *m_out << "\\\""; break;
                case '\\': *m_out << "\\\\"; break;
                case '\n': *m_out << "\\n"; break;
                case '\r': *m_out << "\\r"; break;
                case '\t': *m_out << "\\t"; break;
                case '\b': *m_out << "\\b"; break;
                case '\f': *m_out << "\\f"; break;
                default:
                    if (c < 0x20) {
                        char buffer[8];
                        std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
                        *m_out << buffer;
                    } else {
                        *m_out << static_cast<char>(c);
                    }
            }
        }
        *m_out << '"';
    }

    std::ostream* m_out;
    std::vector<frame> m_stack;
    bool m_top_written = false;
};

}  // namespace tessera::report
