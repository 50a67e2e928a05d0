#pragma once
// Model and optimiser state on disk: a versioned, checksummed file, replaced atomically.
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tessera/detail/path.hpp"
#include "tessera/optim/parameters.hpp"
#include "tessera/tensor/bfloat16.hpp"
#include "tessera/tensor/half.hpp"

namespace tessera::optim {

/// A checkpoint that cannot be read or does not match the model: what() names the file and the reason.
class checkpoint_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

namespace detail {

inline constexpr char checkpoint_magic[8] = {'T', 'E', 'S', 'S', 'C', 'K', 'P', 'T'};
inline constexpr std::uint32_t checkpoint_version = 1;
inline constexpr std::size_t checkpoint_header_size = 8 + 4 + 4 + 8 + 4 + 4;

enum class entry_kind : std::uint32_t { parameter = 0, buffer = 1, optimizer = 2, scalar = 3 };

template <class T>
constexpr std::uint32_t dtype_code() {
    if constexpr (std::is_same_v<T, float>) return 0;
    else if constexpr (std::is_same_v<T, double>) return 1;
    else if constexpr (std::is_same_v<T, tensor::half>) return 2;
    else if constexpr (std::is_same_v<T, tensor::bfloat16>) return 3;
    else static_assert(sizeof(T) == 0, "tessera::optim::checkpoint: unsupported element type");
}

inline std::uint32_t crc(const unsigned char* p, std::size_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
        c = crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return static_cast<std::uint32_t>(c);
}

class writer {
public:
    template <class T>
    void pod(const T& v) {
        const auto* p = reinterpret_cast<const unsigned char*>(&v);
        m_bytes.insert(m_bytes.end(), p, p + sizeof(T));
    }
    template <class T>
    void entry(entry_kind kind, std::string_view name, std::span<const T> values) {
        pod(static_cast<std::uint32_t>(kind));
        pod(dtype_code<T>());
        pod(static_cast<std::uint32_t>(name.size()));
        m_bytes.insert(m_bytes.end(), name.begin(), name.end());
        pod(static_cast<std::uint64_t>(values.size()));
        const auto* p = reinterpret_cast<const unsigned char*>(values.data());
        m_bytes.insert(m_bytes.end(), p, p + values.size_bytes());
        ++m_entries;
    }
    std::vector<unsigned char> m_bytes;
    std::uint64_t m_entries = 0;
};

struct entry {
    entry_kind kind;
    std::uint32_t dtype;
    std::uint64_t count;
    const unsigned char* data;
};

/// Copies a stored entry into values, checking kind, type and size.
template <class T>
void restore(const std::map<std::string, entry, std::less<>>& entries, const std::string& path,
             entry_kind kind, std::string_view name, std::span<T> values) {
    const auto it = entries.find(name);
    if (it == entries.end() || it->second.kind != kind)
        throw checkpoint_error("tessera::optim::load_checkpoint: " + path + " has no entry '" + std::string(name) + "'");
    const entry& e = it->second;
    if (e.dtype != dtype_code<std::remove_const_t<T>>() || e.count != values.size())
        throw checkpoint_error("tessera::optim::load_checkpoint: entry '" + std::string(name) + "' in " + path +
                               " holds " + std::to_string(e.count) + " values of type code " + std::to_string(e.dtype) +
                               ", the model expects " + std::to_string(values.size()) + " of type code " +
                               std::to_string(dtype_code<std::remove_const_t<T>>()));
    std::memcpy(values.data(), e.data, values.size_bytes());
}

}  // namespace detail

/// Writes params (values and buffers such as batch-norm running statistics), the optimiser's state
/// and step count, and `scalars` (e.g. the loss scaler's state, the epoch) to `path`.
/// Layout: magic "TESSCKPT", version, flags, payload size, payload CRC-32, header CRC-32, then entries
/// (kind, type, name, count, raw little-endian values). The file is written to a temporary file of its
/// own beside `path` ("<path>.tmp.XXXXXX": two writers of one path never share one), flushed to disk,
/// renamed over `path`, and the directory flushed, so a crash leaves either the old or the new
/// checkpoint. Any failure throws checkpoint_error and leaves no temporary file.
template <ParameterSet S, class Optimizer>
void save_checkpoint(const std::string& path, S& params, Optimizer& optimizer,
                     const std::map<std::string, double>& scalars = {}) {
    detail::writer w;
    params.visit_parameters([&](std::string_view name, auto value, auto) {
        using W = typename decltype(value)::value_type;
        w.entry(detail::entry_kind::parameter, name, std::span<const W>(value.data(), value.size()));
    });
    if constexpr (requires { params.visit_buffers([](std::string_view, auto) {}); })
        params.visit_buffers([&](std::string_view name, auto value) {
            using B = typename decltype(value)::value_type;
            w.entry(detail::entry_kind::buffer, name, std::span<const B>(value.data(), value.size()));
        });
    optimizer.visit_state([&](std::string_view name, std::span<float> value) {
        w.entry(detail::entry_kind::optimizer, name, std::span<const float>(value.data(), value.size()));
    });
    const double steps = static_cast<double>(optimizer.steps());
    w.entry(detail::entry_kind::scalar, "optimizer.steps", std::span<const double>(&steps, 1));
    for (const auto& [name, v] : scalars) w.entry(detail::entry_kind::scalar, name, std::span<const double>(&v, 1));

    detail::writer body;
    body.pod(w.m_entries);
    body.m_bytes.insert(body.m_bytes.end(), w.m_bytes.begin(), w.m_bytes.end());

    detail::writer header;
    header.m_bytes.reserve(detail::checkpoint_header_size);  // also keeps GCC 12 from a false -Wstringop-overflow at -O1
    header.m_bytes.insert(header.m_bytes.end(), std::begin(detail::checkpoint_magic), std::end(detail::checkpoint_magic));
    header.pod(detail::checkpoint_version);
    header.pod(std::uint32_t{0});
    header.pod(static_cast<std::uint64_t>(body.m_bytes.size()));
    header.pod(detail::crc(body.m_bytes.data(), body.m_bytes.size()));
    header.pod(detail::crc(header.m_bytes.data(), header.m_bytes.size()));

    std::string tmp = path + ".tmp.XXXXXX";
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0)
        throw checkpoint_error("tessera::optim::save_checkpoint: cannot create a temporary file beside " + path +
                               ": " + std::strerror(errno));
    const auto discard = [&](const std::string& what) {
        (void)std::remove(tmp.c_str());
        throw checkpoint_error("tessera::optim::save_checkpoint: " + what);
    };
    (void)::fchmod(fd, 0644);  // mkstemp makes it 0600; a checkpoint is an ordinary file
    std::FILE* f = ::fdopen(fd, "wb");
    if (f == nullptr) {
        const int error = errno;
        ::close(fd);
        discard("cannot write " + tmp + ": " + std::strerror(error));
    }
    const bool ok = std::fwrite(header.m_bytes.data(), 1, header.m_bytes.size(), f) == header.m_bytes.size() &&
                    std::fwrite(body.m_bytes.data(), 1, body.m_bytes.size(), f) == body.m_bytes.size() &&
                    std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed) discard("writing " + tmp + " failed");
    if (std::rename(tmp.c_str(), path.c_str()) != 0)  // atomic on POSIX file systems
        discard("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
    // The rename is durable once the directory that holds the name is on disk.
    const std::string dir = tessera::detail::parent_directory(path);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd < 0)
        throw checkpoint_error("tessera::optim::save_checkpoint: wrote " + path + " but cannot open its directory " +
                               dir + " to flush it: " + std::strerror(errno));
    const bool synced = ::fsync(dfd) == 0 || errno == EINVAL;  // EINVAL: a file system without directory sync
    const int sync_errno = errno;
    ::close(dfd);
    if (!synced)
        throw checkpoint_error("tessera::optim::save_checkpoint: wrote " + path + " but flushing its directory " +
                               dir + " failed: " + std::strerror(sync_errno));
}

/// Reads a checkpoint written by save_checkpoint into params (and their buffers), the optimiser and
/// `scalars`. Throws checkpoint_error for a missing file, a wrong magic or version, a checksum
/// mismatch (corruption, truncation), a duplicate entry, a step count that is not a whole number, or
/// an entry that does not match the model; nothing is modified unless the whole file is valid (the
/// optimizer is prepared and filled as a copy, then assigned; an optimizer that is a view of state
/// elsewhere, such as staged_network::stage_optimizers, prepares that state before validation).
template <ParameterSet S, class Optimizer>
void load_checkpoint_bytes(const std::vector<unsigned char>& bytes, const std::string& path, S& params,
                           Optimizer& optimizer, std::map<std::string, double>* scalars = nullptr);

template <ParameterSet S, class Optimizer>
void load_checkpoint(const std::string& path, S& params, Optimizer& optimizer,
                     std::map<std::string, double>* scalars = nullptr) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr)
        throw checkpoint_error("tessera::optim::load_checkpoint: " + path + ": cannot open: " + std::strerror(errno));
    std::vector<unsigned char> bytes;
    unsigned char chunk[1 << 16];
    for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) bytes.insert(bytes.end(), chunk, chunk + n);
    std::fclose(f);
    load_checkpoint_bytes(bytes, path, params, optimizer, scalars);
}

/// load_checkpoint on a checkpoint's bytes already read; `path` names it in messages.
template <ParameterSet S, class Optimizer>
void load_checkpoint_bytes(const std::vector<unsigned char>& bytes, const std::string& path, S& params,
                           Optimizer& optimizer, std::map<std::string, double>* scalars) {
    const std::string where = "tessera::optim::load_checkpoint: " + path;

    auto read = [&](std::size_t& at, auto& v) {
        if (at + sizeof(v) > bytes.size()) throw checkpoint_error(where + ": truncated");
        std::memcpy(&v, bytes.data() + at, sizeof(v));
        at += sizeof(v);
    };
    if (bytes.size() < detail::checkpoint_header_size) throw checkpoint_error(where + ": too short to be a checkpoint");
    if (std::memcmp(bytes.data(), detail::checkpoint_magic, 8) != 0) throw checkpoint_error(where + ": not a tessera checkpoint (bad magic)");
    std::size_t at = 8;
    std::uint32_t version = 0, flags = 0, payload_crc = 0, header_crc = 0;
    std::uint64_t payload = 0;
    read(at, version);
    read(at, flags);
    read(at, payload);
    read(at, payload_crc);
    const std::uint32_t computed_header = detail::crc(bytes.data(), at);
    read(at, header_crc);
    if (header_crc != computed_header) throw checkpoint_error(where + ": header checksum mismatch (corrupt file)");
    if (version != detail::checkpoint_version)
        throw checkpoint_error(where + ": version " + std::to_string(version) + ", this library reads version " +
                               std::to_string(detail::checkpoint_version));
    if (bytes.size() - at != payload)
        throw checkpoint_error(where + ": payload is " + std::to_string(bytes.size() - at) + " bytes, the header says " +
                               std::to_string(payload) + " (truncated or extended)");
    if (detail::crc(bytes.data() + at, payload) != payload_crc) throw checkpoint_error(where + ": payload checksum mismatch (corrupt file)");

    std::map<std::string, detail::entry, std::less<>> entries;
    std::uint64_t count = 0;
    read(at, count);
    for (std::uint64_t i = 0; i < count; ++i) {
        std::uint32_t kind = 0, dtype = 0, name_size = 0;
        std::uint64_t n = 0;
        read(at, kind);
        read(at, dtype);
        read(at, name_size);
        if (at + name_size > bytes.size()) throw checkpoint_error(where + ": truncated entry name");
        std::string name(reinterpret_cast<const char*>(bytes.data() + at), name_size);
        at += name_size;
        read(at, n);
        static constexpr std::size_t sizes[] = {4, 8, 2, 2};
        if (dtype > 3 || kind > 3) throw checkpoint_error(where + ": entry '" + name + "' has an unknown kind or type");
        if (n > (bytes.size() - at) / sizes[dtype]) throw checkpoint_error(where + ": entry '" + name + "' runs past the end");
        if (entries.count(name) != 0) throw checkpoint_error(where + ": entry '" + name + "' appears twice");
        entries[name] = {static_cast<detail::entry_kind>(kind), dtype, n, bytes.data() + at};
        at += n * sizes[dtype];
    }

    // Validate everything before changing anything.
    auto check = [&](detail::entry_kind kind, std::string_view name, std::uint32_t dtype, std::size_t n) {
        const auto it = entries.find(name);
        if (it == entries.end() || it->second.kind != kind) throw checkpoint_error(where + ": no entry '" + std::string(name) + "'");
        if (it->second.dtype != dtype || it->second.count != n)
            throw checkpoint_error(where + ": entry '" + std::string(name) + "' holds " + std::to_string(it->second.count) +
                                   " values of type code " + std::to_string(it->second.dtype) + ", the model expects " +
                                   std::to_string(n) + " of type code " + std::to_string(dtype));
    };
    params.visit_parameters([&](std::string_view name, auto value, auto) {
        check(detail::entry_kind::parameter, name, detail::dtype_code<typename decltype(value)::value_type>(), value.size());
    });
    if constexpr (requires { params.visit_buffers([](std::string_view, auto) {}); })
        params.visit_buffers([&](std::string_view name, auto value) {
            check(detail::entry_kind::buffer, name, detail::dtype_code<typename decltype(value)::value_type>(), value.size());
        });
    check(detail::entry_kind::scalar, "optimizer.steps", 1, 1);
    double steps = 0;
    detail::restore(entries, path, detail::entry_kind::scalar, "optimizer.steps", std::span<double>(&steps, 1));
    if (!(steps >= 0) || steps > 9007199254740992.0 || steps != std::floor(steps))
        throw checkpoint_error(where + ": optimizer.steps is " + std::to_string(steps) +
                               ", not a whole number of steps in [0, 2^53]");
    // The optimizer's state is sized by prepare(): on a copy, so that a bad file changes nothing.
    Optimizer trial = optimizer;
    trial.prepare(params);
    trial.visit_state([&](std::string_view name, std::span<float> value) {
        check(detail::entry_kind::optimizer, name, 0, value.size());
    });

    params.visit_parameters([&](std::string_view name, auto value, auto) {
        detail::restore(entries, path, detail::entry_kind::parameter, name, value);
    });
    if constexpr (requires { params.visit_buffers([](std::string_view, auto) {}); })
        params.visit_buffers([&](std::string_view name, auto value) {
            detail::restore(entries, path, detail::entry_kind::buffer, name, value);
        });
    trial.visit_state([&](std::string_view name, std::span<float> value) {
        detail::restore(entries, path, detail::entry_kind::optimizer, name, value);
    });
    trial.set_steps(static_cast<std::uint64_t>(steps));
    optimizer = std::move(trial);
    if (scalars != nullptr)
        for (const auto& [name, e] : entries)
            if (e.kind == detail::entry_kind::scalar && name != "optimizer.steps" && e.dtype == 1 && e.count == 1) {
                double v = 0;
                std::memcpy(&v, e.data, sizeof v);
                (*scalars)[name] = v;
            }
}

}  // namespace tessera::optim
