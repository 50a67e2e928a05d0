#pragma once
// Reads one flat JSON object: keys to numbers, booleans or strings (settings files such as a host's).
#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

namespace tessera::report {

/// A flat JSON object that cannot be read: says where (byte offset) and what was expected.
class json_parse_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A value of a flat object.
using json_scalar = std::variant<double, bool, std::string>;

/// Parses `{"key": value, ...}` where each value is a number, true/false or a string (no nesting,
/// no escapes beyond \" and \\). Duplicate keys are refused: a file must not say two things.
/// @code
///   auto o = report::parse_flat_json_object(R"({"cores": 64, "reduce_through_hosts": false})");
///   double cores = std::get<double>(o.at("cores"));
/// @endcode
[[nodiscard]] std::map<std::string, json_scalar> parse_flat_json_object(std::string_view text);

// ---------------------------------------------------------------------------------------------
// implementation

namespace detail {

class flat_json_reader {
public:
    explicit flat_json_reader(std::string_view t) : m_text(t) {}

    std::map<std::string, json_scalar> object() {
        std::map<std::string, json_scalar> out;
        expect('{');
        if (peek() == '}') {
            ++m_at;
        } else {
            for (;;) {
                std::string key = string();
                expect(':');
                json_scalar v = scalar(key);
                if (!out.emplace(key, std::move(v)).second) fail("the key '" + key + "' appears twice");
                if (peek() == ',') {
                    ++m_at;
                    continue;
                }
                expect('}');
                break;
            }
        }
        if (peek() != '\0') fail("text after the object's closing brace");
        return out;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw json_parse_error("tessera::report::parse_flat_json_object: " + what + " (at byte " + std::to_string(m_at) + ")");
    }
    char peek() {
        while (m_at < m_text.size() && std::isspace(static_cast<unsigned char>(m_text[m_at]))) ++m_at;
        return m_at < m_text.size() ? m_text[m_at] : '\0';
    }
    void expect(char c) {
        if (peek() != c) fail(std::string("expected '") + c + "'");
        ++m_at;
    }
    std::string string() {
        expect('"');
        std::string s;
        while (m_at < m_text.size() && m_text[m_at] != '"') {
            if (m_text[m_at] == '\\') {
                if (++m_at >= m_text.size() || (m_text[m_at] != '"' && m_text[m_at] != '\\'))
                    fail("only \\\" and \\\\ escapes are read");
            }
            s += m_text[m_at++];
        }
        if (m_at >= m_text.size()) fail("a string is not closed");
        ++m_at;
        return s;
    }
    json_scalar scalar(const std::string& key) {
        const char c = peek();
        if (c == '"') return string();
        if (m_text.substr(m_at, 4) == "true") return m_at += 4, json_scalar(true);
        if (m_text.substr(m_at, 5) == "false") return m_at += 5, json_scalar(false);
        if (c == '{' || c == '[') fail("the value of '" + key + "' is nested; only numbers, booleans and strings are read");
        const std::string rest(m_text.substr(m_at, 64));
        char* end = nullptr;
        const double v = std::strtod(rest.c_str(), &end);
        if (end == rest.c_str()) fail("the value of '" + key + "' is not a number, a boolean or a string");
        m_at += static_cast<std::size_t>(end - rest.c_str());
        return v;
    }

    std::string_view m_text;
    std::size_t m_at = 0;
};

}  // namespace detail

inline std::map<std::string, json_scalar> parse_flat_json_object(std::string_view text) {
    return detail::flat_json_reader(text).object();
}

}  // namespace tessera::report
