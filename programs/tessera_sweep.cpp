// tessera-sweep: the PopTorch tutorials' tables on the modelled clock. Re-runs the experiments of
// seeds 000 and 001 (ResNet-101 on CIFAR-10 over a 2-IPU pipeline: G = 3; G = 8; + D = 4; + 8-bit
// I/O; + async loader) and 003 (4 replicas fed by 1 or 2 host processes) as dry runs, and prints
// the modelled epoch time and images/s beside what the tutorials' users measured.
//   tessera-sweep [--json FILE] [--csv FILE] [--svg FILE] [--calibrate] [--published [--commands]]
// --calibrate fits the host_spec costs again on seed 000's table (the only fitted constants: the
// device model fits none) and prints them before the table.
// --published prints instead published ResNet-50 and BERT results (programs/published_figures.hpp,
// published_transformers.hpp) beside tessera's dry runs of their configurations, every one a prediction
// (--commands: each BERT row's tessera-train command).
#include <CLI/CLI.hpp>

#include <tessera/tessera.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "published_figures.hpp"
#include "published_transformers.hpp"
#include "tutorial_sweep.hpp"

namespace {

namespace ts = tessera;
namespace cfg = tessera::config;
using ts::programs::seed_row;
using ts::programs::seed_rows;

struct result_row {
    const seed_row* seed;
    ts::exec::epoch_estimate estimate;
};

// ---- calibration ---------------------------------------------------------------------------------

// The host costs that best reproduce seed 000's epoch times (least squares of the log ratios),
// with each row's IPU time from its dry run.
ts::emulator::host_spec calibrate_host(const std::vector<result_row>& rows, ts::emulator::host_spec host) {
    std::vector<const result_row*> seed000;
    for (const auto& r : rows)
        if (r.seed->seed == "000") seed000.push_back(&r);
    const auto with = [host](const std::vector<double>& x) {
        auto h = host;
        h.float_seconds_per_value = std::exp(x[0]);
        h.eight_bit_seconds_per_value = std::exp(x[1]);
        h.feed_seconds_per_byte = std::exp(x[2]);
        h.dispatch_seconds = std::exp(x[3]);
        return h;
    };
    const auto epoch = [](const result_row& r, const ts::emulator::host_spec& h) {
        const auto& w = r.estimate.host_per_call;
        const double values = w.bytes / w.samples / (r.seed->eight_bit_io ? 1.0 : 4.0);
        ts::emulator::host_clock clock(h, {.async = r.seed->async_loader, .instances = r.seed->instances});
        double start = 0;
        for (int e = 0; e < 2; ++e) {
            start = clock.now();
            for (std::size_t k = 0; k < r.estimate.calls; ++k)
                (void)clock.call(h.prepare_seconds(w.samples, values, r.seed->eight_bit_io ? 1 : 4),
                                 h.feed_seconds(w.bytes), r.estimate.call_device_seconds);
        }
        return clock.now() - start;
    };
    const auto error = [&](const std::vector<double>& x) {
        const auto h = with(x);
        double sum = 0;
        for (const auto* r : seed000) {
            const double e = std::log(epoch(*r, h) / r->seed->epoch_seconds);
            sum += e * e;
        }
        return sum;
    };
    std::vector<double> x{std::log(host.float_seconds_per_value), std::log(host.eight_bit_seconds_per_value),
                          std::log(host.feed_seconds_per_byte), std::log(host.dispatch_seconds)};
    for (int round = 0; round < 4; ++round) x = ts::programs::nelder_mead(error, x, 0.5, 400);
    return with(x);
}

// ---- output --------------------------------------------------------------------------------------

double ratio_to_previous(const std::vector<result_row>& rows, std::size_t i, bool modelled) {
    if (i == 0 || rows[i].seed->seed != rows[i - 1].seed->seed) return 0;
    const auto value = [&](const result_row& r) { return modelled ? r.estimate.seconds : r.seed->epoch_seconds; };
    return value(rows[i - 1]) > 0 ? value(rows[i]) / value(rows[i - 1]) : 0;
}

std::string fixed(double v, int digits) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", digits, v);
    return b;
}

void write_json(std::ostream& out, const std::vector<result_row>& rows, const ts::emulator::device_spec& device,
                const ts::emulator::host_spec& host) {
    ts::report::json_writer j(out);
    j.begin_object();
    j.key("model").value("torchvision ResNet-101, CIFAR-10 3x32x32, 2-IPU pipeline cut before layer3[8], 16.16");
    j.key("device").begin_object().key("pass_overhead_cycles").value(device.pass_overhead_cycles).end_object();
    j.key("host").begin_object();
    j.key("float_seconds_per_value").value(host.float_seconds_per_value);
    j.key("eight_bit_seconds_per_value").value(host.eight_bit_seconds_per_value);
    j.key("feed_seconds_per_byte").value(host.feed_seconds_per_byte);
    j.key("dispatch_seconds").value(host.dispatch_seconds);
    j.end_object();
    j.key("rows").begin_array();
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        const auto& e = r.estimate;
        j.begin_object();
        j.member("seed", r.seed->seed).member("step", r.seed->step);
        j.member("batch_size", r.seed->batch_size).member("gradient_accumulation", r.seed->gradient_accumulation);
        j.member("device_iterations", r.seed->device_iterations).member("eight_bit_io", r.seed->eight_bit_io);
        j.member("async_dataloader", r.seed->async_loader).member("replicas", r.seed->replicas);
        j.member("instances", r.seed->instances).member("calls_per_epoch", e.calls);
        j.member("modelled_epoch_seconds", e.seconds).member("modelled_images_per_second", e.samples_per_second());
        j.member("modelled_device_seconds", e.device_seconds).member("modelled_host_wait_seconds", e.host_wait_seconds);
        if (r.seed->epoch_seconds > 0) {
            j.member("seed_epoch_seconds", r.seed->epoch_seconds);
            j.member("seed_images_per_second", double(e.samples) / r.seed->epoch_seconds);
            j.member("error", e.seconds / r.seed->epoch_seconds - 1.0);
        } else {
            j.key("seed_epoch_seconds").null();
        }
        const double mr = ratio_to_previous(rows, i, true), sr = ratio_to_previous(rows, i, false);
        if (mr > 0 && sr > 0) j.member("ratio_to_previous", mr).member("seed_ratio_to_previous", sr);
        j.end_object();
    }
    j.end_array();
    j.end_object();
    out << '\n';
}

void write_csv(std::ostream& out, const std::vector<result_row>& rows) {
    out << "seed,step,modelled_epoch_seconds,modelled_images_per_second,seed_epoch_seconds,error\n";
    for (const auto& r : rows) {
        out << r.seed->seed << ',' << r.seed->step << ',' << r.estimate.seconds << ',' << r.estimate.samples_per_second()
            << ',';
        if (r.seed->epoch_seconds > 0) out << r.seed->epoch_seconds << ',' << r.estimate.seconds / r.seed->epoch_seconds - 1.0;
        else out << ',';
        out << '\n';
    }
}

// Bars of modelled and measured epoch times, one group per row.
void write_svg(std::ostream& out, const std::vector<result_row>& rows) {
    double top = 0;
    for (const auto& r : rows) top = std::max({top, r.estimate.seconds, r.seed->epoch_seconds});
    const double left = 150, row_h = 34, width = 760;
    ts::report::svg_canvas svg(width, 60 + row_h * double(rows.size()));
    svg.text(10, 22, "Epoch seconds: tessera's modelled clock (blue) and the tutorials' measured (grey)", 14);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        const double y = 40 + row_h * double(i), scale = (width - left - 60) / top;
        svg.text(10, y + 16, std::string(r.seed->seed) + " " + std::string(r.seed->step), 11);
        svg.rect(left, y + 2, r.estimate.seconds * scale, 13, "#4c72b0", fixed(r.estimate.seconds, 1) + " s modelled");
        svg.text(left + r.estimate.seconds * scale + 4, y + 13, fixed(r.estimate.seconds, 1) + " s", 10);
        if (r.seed->epoch_seconds > 0) {
            svg.rect(left, y + 16, r.seed->epoch_seconds * scale, 13, "#8c8c8c", fixed(r.seed->epoch_seconds, 0) + " s measured");
            svg.text(left + r.seed->epoch_seconds * scale + 4, y + 27, fixed(r.seed->epoch_seconds, 0) + " s", 10);
        }
    }
    svg.write(out);
}

template <class Writer>
void write_file(const std::string& path, Writer&& writer) {
    if (path.empty()) return;
    std::ofstream out(path);
    if (!out) throw std::runtime_error("tessera-sweep: cannot write " + path);
    writer(out);
}

}  // namespace

// Published figures against their dry runs; the predictions' median absolute error and worst ratio.
int print_published(const ts::emulator::device_spec& device, bool commands) {
    const ts::nn::resnet50<cfg::half> net(3, 1000);
    ts::report::table t({"system", "IPUs", "batch x G x D", "published", "modelled", "error", "fullest IPU", "figure"});
    std::vector<double> errors;
    double worst = 1;
    for (const auto& f : ts::programs::published_figures) {
        const auto e = ts::programs::dry_run_figure(net, f, device);
        const double ratio = e.images_per_second / f.images_per_second, error = ratio - 1;
        const std::size_t ipus = f.replicas * (f.shape == ts::programs::run_shape::pipeline_of_four ? 4 : 1);
        char mib[64];
        std::snprintf(mib, sizeof mib, "%.0f MiB%s", double(e.fullest_ipu_bytes) / 1048576.0, e.fits ? "" : " (over)");
        t.add_row({f.system, std::to_string(ipus),
                   std::to_string(f.micro_batch) + " x " + std::to_string(f.gradient_accumulation) + " x " +
                       std::to_string(f.device_iterations),
                   fixed(f.images_per_second, 0), fixed(e.images_per_second, 0), fixed(100 * error, 0) + " %", mib, f.kind});
        errors.push_back(std::abs(error));
        worst = std::max({worst, ratio, 1 / ratio});
    }
    std::cout << t;
    const auto summary = [](std::vector<double> sorted, double off_by) {
        std::sort(sorted.begin(), sorted.end());
        const std::size_t n = sorted.size();
        const double median = n == 0 ? 0 : n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
        std::printf("%zu predictions, none fitted: median absolute error %.0f %%, the worst off by %.2fx\n", n, 100 * median,
                    off_by);
    };
    summary(errors, worst);

    // BERT pre-training, as tessera-train --dry-run prices each configuration.
    std::printf("\nBERT pre-training, sequences/s (every row's command: tessera-sweep --published --commands)\n");
    ts::report::table b({"system", "IPUs", "seq x batch x G", "published", "modelled", "error", "fullest IPU", "figure"});
    errors.clear(), worst = 1;
    for (const auto& f : ts::programs::published_transformers) {
        const auto e = ts::programs::dry_run_transformer(f);
        const double ratio = e.images_per_second / f.sequences_per_second, error = ratio - 1;
        char mib[64];
        std::snprintf(mib, sizeof mib, "%.0f MiB%s", double(e.fullest_ipu_bytes) / 1048576.0, e.fits ? "" : " (over)");
        b.add_row({f.system, std::to_string(f.replicas * f.layers_per_ipu.size()),
                   std::to_string(f.seq_len) + " x " + std::to_string(f.micro_batch) + " x " +
                       std::to_string(f.gradient_accumulation),
                   fixed(f.sequences_per_second, 0), fixed(e.images_per_second, 0), fixed(100 * error, 0) + " %", mib,
                   f.kind});
        errors.push_back(std::abs(error));
        worst = std::max({worst, ratio, 1 / ratio});
    }
    std::cout << b;
    summary(errors, worst);
    if (commands)
        for (const auto& f : ts::programs::published_transformers)
            std::printf("%s:\n  %s\n", f.system, ts::programs::command_of(f).c_str());
    return 0;
}

int main(int argc, char** argv) {
    CLI::App app{"tessera-sweep: the PopTorch tutorials' experiments on tessera's modelled IPU clock"};
    std::string json_path, csv_path, svg_path;
    bool calibrate = false, published = false;
    app.add_option("--json", json_path, "write the rows as JSON");
    app.add_option("--csv", csv_path, "write the rows as CSV");
    app.add_option("--svg", svg_path, "write a chart of modelled and measured epoch times");
    app.add_flag("--calibrate", calibrate,
                 "fit the host costs again on seed 000's table");
    app.add_flag("--published", published,
"print published ResNet-50 and BERT results (MLPerf, Graphcore's tables, PopRT, PaddlePaddle) beside "
                 "tessera's dry runs");
    bool commands = false;
    app.add_flag("--commands", commands, "with --published: the tessera-train command of every BERT row")->needs("--published");
    CLI11_PARSE(app, argc, argv);

    try {
        ts::emulator::device_spec device{};
        ts::emulator::host_spec host{};
        if (published) return print_published(device, commands);
        const ts::programs::seed_network net(3, 10);
        std::vector<result_row> rows;
        const auto run_all = [&] {
            rows.clear();
            for (const auto& row : seed_rows) rows.push_back({&row, ts::programs::dry_run_row(net, row, device, host)});
        };
        run_all();
        if (calibrate) {
            host = calibrate_host(rows, host);
            std::printf("host_spec: float_seconds_per_value = %.4g, eight_bit_seconds_per_value = %.4g, "
                        "feed_seconds_per_byte = %.4g, dispatch_seconds = %.4g\n",
                        host.float_seconds_per_value, host.eight_bit_seconds_per_value, host.feed_seconds_per_byte,
                        host.dispatch_seconds);
            run_all();
        }
        ts::report::table t({"seed", "step", "calls", "modelled s", "images/s", "IPUs busy s", "host wait s", "seed s",
                             "error", "ratio", "seed ratio"});
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const auto& r = rows[i];
            const auto& e = r.estimate;
            const double mr = ratio_to_previous(rows, i, true), sr = ratio_to_previous(rows, i, false);
            t.add_row({std::string(r.seed->seed), std::string(r.seed->step), std::to_string(e.calls), fixed(e.seconds, 2),
                       fixed(e.samples_per_second(), 0), fixed(e.device_seconds, 2), fixed(e.host_wait_seconds, 2),
                       r.seed->epoch_seconds > 0 ? fixed(r.seed->epoch_seconds, 0) : "-",
                       r.seed->epoch_seconds > 0 ? fixed(100 * (e.seconds / r.seed->epoch_seconds - 1), 0) + " %" : "-",
                       mr > 0 ? fixed(mr, 3) : "", mr > 0 && sr > 0 ? fixed(sr, 3) : ""});
        }
        std::cout << t;
        write_file(json_path, [&](std::ostream& o) { write_json(o, rows, device, host); });
        write_file(csv_path, [&](std::ostream& o) { write_csv(o, rows); });
        write_file(svg_path, [&](std::ostream& o) { write_svg(o, rows); });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera-sweep: %s\n", e.what());
        return 1;
    }
}
