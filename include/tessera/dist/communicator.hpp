#pragma once
// An MPI communicator with the few collectives data parallelism needs, each deterministic.
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/dist/error.hpp"

namespace tessera::dist {

namespace detail {

/// Throws dist_error naming the call and MPI's own text for a failed MPI call.
inline void check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    throw dist_error(std::string("tessera::dist: ") + call + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

inline int count_of(std::size_t n, const char* what) {
    if (n > static_cast<std::size_t>(INT_MAX))
        throw dist_error(std::string("tessera::dist: ") + what + " of " + std::to_string(n) +
                         " elements is more than one MPI message carries (" + std::to_string(INT_MAX) + ")");
    return static_cast<int>(n);
}

template <class T>
MPI_Datatype datatype() {
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    else {
        static_assert(std::is_same_v<T, std::byte>, "tessera::dist: sums are over float or double, broadcasts over bytes");
        return MPI_BYTE;
    }
}

}  // namespace detail

/// A group of host processes (MPI ranks). world() is MPI_COMM_WORLD; duplicate() gives an owned
/// communicator whose collectives never mix with another's, so two threads may each run
/// collectives on their own duplicate at the same time (MPI_THREAD_MULTIPLE, which
/// dist::environment requires). Errors are returned by MPI and thrown as dist_error.
/// Owned communicators must be destroyed before the dist::environment that made MPI ready.
/// @code
///   dist::environment env(&argc, &argv);
///   auto comm = env.world();
///   std::vector<double> totals{loss, hits};
///   comm.sum_in_rank_order(std::span<double>(totals));
/// @endcode
class communicator {
public:
    [[nodiscard]] static communicator world() {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        return communicator(MPI_COMM_WORLD, false);
    }

    communicator(communicator&& other) noexcept
        : m_comm(std::exchange(other.m_comm, MPI_COMM_NULL)), m_owned(std::exchange(other.m_owned, false)) {}
    communicator& operator=(communicator&& other) noexcept {
        if (this != &other) {
            release();
            m_comm = std::exchange(other.m_comm, MPI_COMM_NULL);
            m_owned = std::exchange(other.m_owned, false);
        }
        return *this;
    }
    communicator(const communicator&) = delete;
    communicator& operator=(const communicator&) = delete;
    ~communicator() { release(); }

    /// A new communicator over the same ranks (collective: every rank calls it, in the same order).
    [[nodiscard]] communicator duplicate() const {
        MPI_Comm copy = MPI_COMM_NULL;
        detail::check(MPI_Comm_dup(m_comm, &copy), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(copy, MPI_ERRORS_RETURN);
        return communicator(copy, true);
    }

    [[nodiscard]] std::size_t rank() const {
        int r = 0;
        detail::check(MPI_Comm_rank(m_comm, &r), "MPI_Comm_rank");
        return static_cast<std::size_t>(r);
    }
    [[nodiscard]] std::size_t size() const {
        int s = 0;
        detail::check(MPI_Comm_size(m_comm, &s), "MPI_Comm_size");
        return static_cast<std::size_t>(s);
    }

    /// Replaces `values` on every rank by their element-wise sum over the ranks, added in rank order
    /// (((v_0 + v_1) + v_2) + ...): the same bits on every rank and in every run, whatever MPI's
    /// own reduction algorithm would have chosen. Gathers every rank's values (size × the data on
    /// each rank): a fixed order is worth that for gradients of millions of values, not billions.
    template <class T>
    void sum_in_rank_order(std::span<T> values) const {
        static_assert(std::is_floating_point_v<T>, "tessera::dist::communicator::sum_in_rank_order: float or double");
        const std::size_t p = size();
        if (p == 1 || values.empty()) return;
        const int n = detail::count_of(values.size(), "a sum");
        detail::count_of(values.size() * p, "a gathered sum");
        std::vector<T> all(values.size() * p);
        detail::check(MPI_Allgather(values.data(), n, detail::datatype<T>(), all.data(), n, detail::datatype<T>(), m_comm),
                      "MPI_Allgather");
        for (std::size_t i = 0; i < values.size(); ++i) {
            T sum = all[i];
            for (std::size_t r = 1; r < p; ++r) sum += all[r * values.size() + i];
            values[i] = sum;
        }
    }

    /// Each rank brings its part [bounds[rank], bounds[rank + 1]) of `values`; afterwards every rank's
    /// `values` holds every rank's part (an all-gather in place; elements outside all parts unchanged).
    /// `bounds` has size() + 1 increasing entries, the same on every rank.
    template <class T>
    void all_gather_parts(std::span<T> values, std::span<const std::size_t> bounds) const {
        static_assert(std::is_floating_point_v<T>, "tessera::dist::communicator::all_gather_parts: float or double");
        const std::size_t p = size();
        if (bounds.size() != p + 1 || bounds.back() > values.size())
            throw dist_error("tessera::dist::communicator::all_gather_parts: " + std::to_string(bounds.size()) +
                             " bounds over " + std::to_string(values.size()) + " values for " + std::to_string(p) +
                             " ranks (need ranks + 1, within the values)");
        if (p == 1) return;
        std::vector<int> counts(p), offsets(p);
        for (std::size_t r = 0; r < p; ++r) {
            if (bounds[r + 1] < bounds[r])
                throw dist_error("tessera::dist::communicator::all_gather_parts: bounds decrease at rank " + std::to_string(r));
            offsets[r] = detail::count_of(bounds[r], "an offset");
            counts[r] = detail::count_of(bounds[r + 1] - bounds[r], "a part");
        }
        detail::check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, values.data(), counts.data(), offsets.data(),
                                     detail::datatype<T>(), m_comm),
                      "MPI_Allgatherv");
    }

    /// Copies rank `root`'s bytes into every rank's `bytes` (the same length on every rank).
    void broadcast(std::span<std::byte> bytes, std::size_t root = 0) const {
        if (bytes.empty()) return;
        detail::check(MPI_Bcast(bytes.data(), detail::count_of(bytes.size(), "a broadcast"), MPI_BYTE,
                                static_cast<int>(root), m_comm),
                      "MPI_Bcast");
    }

    /// Throws dist_error on every rank unless every rank passes the same `text` (e.g. a run's
    /// configuration): the message names `what`, the first rank that differs and both texts.
    void check_same(std::string_view what, const std::string& text) const {
        const std::size_t p = size();
        if (p == 1) return;
        const int length = detail::count_of(text.size(), "a text");
        std::vector<int> lengths(p);
        detail::check(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, m_comm), "MPI_Allgather");
        std::vector<int> offsets(p);
        std::size_t total = 0;
        for (std::size_t r = 0; r < p; ++r) {
            offsets[r] = detail::count_of(total, "texts");
            total += static_cast<std::size_t>(lengths[r]);
        }
        std::string all(total, '\0');
        detail::check(MPI_Allgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                                     m_comm),
                      "MPI_Allgatherv");
        const auto text_of = [&](std::size_t r) {
            return all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r]));
        };
        for (std::size_t r = 1; r < p; ++r)
            if (text_of(r) != text_of(0))
                throw dist_error("tessera::dist: rank " + std::to_string(r) + " was started with a different " +
                                 std::string(what) + " than rank 0:\n  rank 0: " + text_of(0) + "\n  rank " +
                                 std::to_string(r) + ": " + text_of(r));
    }

    void barrier() const { detail::check(MPI_Barrier(m_comm), "MPI_Barrier"); }

    [[nodiscard]] MPI_Comm native() const noexcept { return m_comm; }

private:
    communicator(MPI_Comm comm, bool owned) noexcept : m_comm(comm), m_owned(owned) {}
    void release() noexcept {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (m_owned && m_comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&m_comm);
        m_comm = MPI_COMM_NULL;
        m_owned = false;
    }

    MPI_Comm m_comm = MPI_COMM_NULL;
    bool m_owned = false;
};

}  // namespace tessera::dist
