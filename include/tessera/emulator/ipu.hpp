#pragma once
// One emulated IPU: a worker thread, a memory arena and a modelled clock.
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/memory_arena.hpp"
#include "tessera/emulator/modelled_clock.hpp"
#include "tessera/emulator/worker.hpp"

namespace tessera::emulator {

/// An IPU runs one job at a time on a worker thread of its own (kept between jobs, see worker).
/// The job's exception is kept and rethrown by wait(), as Taskflow's future.get() does; an optional
/// failure hook runs on the worker at once so that peers blocked on channels can be woken (see cluster).
/// @code
///   emulator::ipu dev(0);
///   dev.launch([](emulator::ipu& self) { self.clock().compute(1e9, 16, activity::forward); });
///   dev.wait();   // rethrows what the job threw
/// @endcode
class ipu {
public:
    using job = std::function<void(ipu&)>;
    using failure_hook = worker::failure_hook;

    explicit ipu(std::size_t id, device_spec spec = {}, bool record_trace = true)
        : m_id(id), m_spec((spec.validate(), spec)), m_arena(id, spec.memory_bytes()), m_clock(spec, record_trace) {}
    ipu(const ipu&) = delete;
    ipu& operator=(const ipu&) = delete;
    /// Joins the worker. A running job must be able to finish (close its channels first).
    ~ipu() = default;

    /// Starts `j` on the worker; throws std::logic_error if a job is still running.
    void launch(job j, failure_hook on_failure = {}) {
        if (!j) throw std::invalid_argument("tessera::emulator::ipu::launch: IPU " + std::to_string(m_id) + ": empty job");
        try {
            m_worker.launch([this, j = std::move(j)] { j(*this); }, std::move(on_failure));
        } catch (const std::logic_error&) {
            throw std::logic_error("tessera::emulator::ipu::launch: IPU " + std::to_string(m_id) +
                                   " is still running a job (wait() for it first)");
        }
    }

    /// Blocks until the job is done and returns its exception (nullptr on success); the IPU is idle after.
    [[nodiscard]] std::exception_ptr join() { return m_worker.join(); }

    /// join(), rethrowing the job's exception.
    void wait() {
        if (auto e = join()) std::rethrow_exception(e);
    }

    /// True once the job has finished (a bounded wait: never blocks longer than `timeout`).
    template <class Rep, class Period>
    [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> timeout) {
        return m_worker.wait_for(timeout);
    }

    [[nodiscard]] std::size_t id() const noexcept { return m_id; }
    [[nodiscard]] const device_spec& spec() const noexcept { return m_spec; }
    [[nodiscard]] memory_arena& arena() noexcept { return m_arena; }
    [[nodiscard]] const memory_arena& arena() const noexcept { return m_arena; }
    /// The modelled clock: touch it from the running job, or from the caller between jobs.
    [[nodiscard]] modelled_clock& clock() noexcept { return m_clock; }
    [[nodiscard]] const modelled_clock& clock() const noexcept { return m_clock; }

private:
    const std::size_t m_id;
    const device_spec m_spec;
    memory_arena m_arena;
    modelled_clock m_clock;
    worker m_worker;  // last: joined before the members its job uses are destroyed
};

}  // namespace tessera::emulator
