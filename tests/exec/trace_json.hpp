#pragma once
// A reader of the Trace Event Format for tests: a whole JSON document (objects, arrays, numbers,
// strings, booleans, null), parsed independently of tessera's writer, and the trace's events.
#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::test {

struct json {
    enum kind_t { null, boolean, number, string, array, object } kind = null;
    bool b = false;
    double n = 0;
    std::string s;
    std::vector<json> items;
    std::map<std::string, json> members;

    [[nodiscard]] const json& at(const std::string& k) const {
        const auto it = members.find(k);
        if (kind != object || it == members.end()) throw std::runtime_error("json: no member '" + k + "'");
        return it->second;
    }
    [[nodiscard]] bool has(const std::string& k) const { return kind == object && members.count(k) > 0; }
};

class json_parser {
public:
    explicit json_parser(std::string_view text) : m_t(text) {}
    json document() {
        json v = value();
        space();
        if (m_at != m_t.size()) fail("text after the document");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw std::runtime_error("json: " + what + " at byte " + std::to_string(m_at));
    }
    void space() {
        while (m_at < m_t.size() && std::isspace(static_cast<unsigned char>(m_t[m_at]))) ++m_at;
    }
    char next() {
        space();
        if (m_at >= m_t.size()) fail("unexpected end");
        return m_t[m_at];
    }
    void expect(char c) {
        if (next() != c) fail(std::string("expected '") + c + "'");
        ++m_at;
    }
    bool word(std::string_view w) {
        if (m_t.substr(m_at, w.size()) != w) return false;
        m_at += w.size();
        return true;
    }
    std::string text() {
        expect('"');
        std::string out;
        while (m_at < m_t.size() && m_t[m_at] != '"') {
            char c = m_t[m_at++];
            if (c == '\\') {
                if (m_at >= m_t.size()) fail("unfinished escape");
                const char e = m_t[m_at++];
                switch (e) {
                    case 'n': c = '\n'; break;
                    case 't': c = '\t'; break;
                    case 'r': c = '\r'; break;
                    case 'b': c = '\b'; break;
                    case 'f': c = '\f'; break;
                    case 'u': c = static_cast<char>(std::strtol(std::string(m_t.substr(m_at, 4)).c_str(), nullptr, 16)), m_at += 4; break;
                    default: c = e;
                }
            }
            out += c;
        }
        expect('"');
        return out;
    }
    json value() {
        json v;
        const char c = next();
        if (c == '{') {
            ++m_at;
            v.kind = json::object;
            if (next() == '}') return ++m_at, v;
            for (;;) {
                std::string k = text();
                expect(':');
                if (!v.members.emplace(k, value()).second) fail("key '" + k + "' twice");
                if (next() == ',') { ++m_at; continue; }
                expect('}');
                return v;
            }
        }
        if (c == '[') {
            ++m_at;
            v.kind = json::array;
            if (next() == ']') return ++m_at, v;
            for (;;) {
                v.items.push_back(value());
                if (next() == ',') { ++m_at; continue; }
                expect(']');
                return v;
            }
        }
        if (c == '"') {
            v.kind = json::string;
            v.s = text();
            return v;
        }
        if (word("true")) return v.kind = json::boolean, v.b = true, v;
        if (word("false")) return v.kind = json::boolean, v;
        if (word("null")) return v;
        char* end = nullptr;
        const std::string copy(m_t.substr(m_at, 64));
        v.n = std::strtod(copy.c_str(), &end);
        if (end == copy.c_str()) fail("expected a value");
        m_at += std::size_t(end - copy.c_str());
        v.kind = json::number;
        return v;
    }

    std::string_view m_t;
    std::size_t m_at = 0;
};

/// One event of a trace.
struct trace_event {
    std::string ph, name, cat;
    int pid = 0, tid = 0;
    double ts = 0, dur = 0;  // microseconds
    double id = 0;           // flows
    double value = 0;        // counters: the first series
    const json* args = nullptr;
};

/// The trace's document and its events.
struct trace_file {
    json doc;
    std::vector<trace_event> events;
};

[[nodiscard]] inline trace_file read_trace(std::string_view text) {
    trace_file t;
    t.doc = json_parser(text).document();
    for (const auto& e : t.doc.at("traceEvents").items) {
        trace_event ev;
        ev.ph = e.at("ph").s, ev.name = e.at("name").s;
        ev.pid = int(e.at("pid").n), ev.tid = int(e.at("tid").n);
        if (e.has("cat")) ev.cat = e.at("cat").s;
        if (e.has("ts")) ev.ts = e.at("ts").n;
        if (e.has("dur")) ev.dur = e.at("dur").n;
        if (e.has("id")) ev.id = e.at("id").n;
        if (e.has("args")) {
            ev.args = &e.at("args");
            if (ev.ph == "C" && !ev.args->members.empty()) ev.value = ev.args->members.begin()->second.n;
        }
        t.events.push_back(std::move(ev));
    }
    return t;
}

}  // namespace tessera::test
