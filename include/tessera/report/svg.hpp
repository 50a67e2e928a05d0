#pragma once
// A minimal SVG canvas: rectangles, lines and text, written as one standalone document.
#include <cstdio>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tessera::report {

/// Escapes &, <, >, " and ' for XML text and attribute values.
[[nodiscard]] inline std::string xml_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default: out += c;
        }
    }
    return out;
}

/// Elements are appended in drawing order; str() closes the document.
/// @code
///   report::svg_canvas svg(400, 100);
///   svg.rect(10, 10, 50, 20, "#4c72b0", "fwd mb0");
///   svg.text(10, 50, "IPU 0");
///   std::ofstream("timeline.svg") << svg.str();
/// @endcode
class svg_canvas {
public:
    svg_canvas(double width, double height) : m_width(width), m_height(height) {
        if (!(width > 0) || !(height > 0))
            throw std::invalid_argument("tessera::report::svg_canvas: size must be positive, got " +
                                        number(width) + " x " + number(height));
    }

    /// A filled rectangle; a non-empty `title` becomes a hover tooltip.
    void rect(double x, double y, double w, double h, std::string_view fill, std::string_view title = {},
              std::string_view stroke = {}) {
        m_body << "<rect x=\"" << number(x) << "\" y=\"" << number(y) << "\" width=\"" << number(w)
               << "\" height=\"" << number(h) << "\" fill=\"" << xml_escape(fill) << '"';
        if (!stroke.empty()) m_body << " stroke=\"" << xml_escape(stroke) << "\" stroke-width=\"0.5\"";
        if (title.empty()) {
            m_body << "/>\n";
        } else {
            m_body << "><title>" << xml_escape(title) << "</title></rect>\n";
        }
        ++m_elements;
    }

    void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1.0) {
        m_body << "<line x1=\"" << number(x1) << "\" y1=\"" << number(y1) << "\" x2=\"" << number(x2)
               << "\" y2=\"" << number(y2) << "\" stroke=\"" << xml_escape(stroke) << "\" stroke-width=\""
               << number(width) << "\"/>\n";
        ++m_elements;
    }

    /// Text with its baseline at y; anchor is "start", "middle" or "end".
    void text(double x, double y, std::string_view content, double size = 12.0, std::string_view anchor = "start",
              std::string_view fill = "#000") {
        m_body << "<text x=\"" << number(x) << "\" y=\"" << number(y) << "\" font-size=\"" << number(size)
               << "\" font-family=\"sans-serif\" text-anchor=\"" << xml_escape(anchor) << "\" fill=\""
               << xml_escape(fill) << "\">" << xml_escape(content) << "</text>\n";
        ++m_elements;
    }

    [[nodiscard]] std::size_t elements() const noexcept { return m_elements; }
    [[nodiscard]] double width() const noexcept { return m_width; }
    [[nodiscard]] double height() const noexcept { return m_height; }

    [[nodiscard]] std::string str() const {
        std::ostringstream out;
        write(out);
        return out.str();
    }
    void write(std::ostream& out) const {
        out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << number(m_width) << "\" height=\""
            << number(m_height) << "\" viewBox=\"0 0 " << number(m_width) << ' ' << number(m_height) << "\">\n"
            << m_body.str() << "</svg>\n";
    }

private:
    [[nodiscard]] static std::string number(double v) {
        char buffer[32];
        std::snprintf(buffer, sizeof buffer, "%.6g", v);
        return buffer;
    }

    double m_width, m_height;
    std::ostringstream m_body;
    std::size_t m_elements = 0;
};

}  // namespace tessera::report
