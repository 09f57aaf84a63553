#ifndef NUMAPLACE_BENCHMARK_HPP_INCLUDED
#define NUMAPLACE_BENCHMARK_HPP_INCLUDED

/// \file
/// The Google Benchmark face (component `benchmark`, target numaplace::benchmark: numaplace::core and
/// benchmark::benchmark). From a user's benchmark function: an observation's deltas as counters per
/// iteration, the locality and pages per node of a range, and one benchmark per compared placement of
/// the user's own kernel, each placement's allocation and first touch outside the timed region.
/// Design and the counters' names: docs/benchmark.md.

#include "compared_placement.hpp"
#include "observation_counters.hpp"
#include "observe.hpp"
#include "partition.hpp"
#include "where.hpp"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {

/// \effects adds every value of `c` as a counter of `state` (per-iteration values as
/// `benchmark::Counter::kAvgIterations`, the others as they are); when a group is absent, sets the label
/// to "unmeasured: <group> (<reason>); ..." (one label per benchmark run: JSON field "label"). A counter
/// that was not measured is left out, never added as 0.
inline void add_counters(::benchmark::State& state, const counter_set& c) {
    for (const named_value& v : c.values)
        state.counters[v.name] = ::benchmark::Counter(
            v.value, v.per_iteration ? ::benchmark::Counter::kAvgIterations : ::benchmark::Counter::kDefaults);
    if (!c.absent.empty()) state.SetLabel("unmeasured: " + c.absent_text());
}

/// \effects adds the deltas of `o` (an observation of the benchmark's iterations) as counters per
/// iteration (names: `observation_counters`), the reasons of unmeasured groups in the label.
inline void add_observation_counters(::benchmark::State& state, const observation& o) {
    add_counters(state, observation_counters(o));
}

/// \effects adds `locality` (pages on their block's node / touched pages), `pages.node<k>` and
/// `pages.untouched` of the `part.element_count()` elements at `data`. \throws std::system_error when
/// the kernel refuses the page query (where()).
template <class T>
void add_locality_counters(::benchmark::State& state, const T* data, const partition<T>& part) {
    add_counters(state, locality_counters(where(data, part)));
}

/// \effects the same for the matrix of a row partition (`rows.elements()`).
template <class T>
void add_locality_counters(::benchmark::State& state, const T* data, const row_partition<T>& rows) {
    add_locality_counters(state, data, rows.elements());
}

/// \effects the same for [p, p + bytes) held against one node.
inline void add_locality_counters(::benchmark::State& state, const void* p, std::size_t bytes, int node) {
    add_counters(state, locality_counters(where(p, bytes), node));
}

namespace detail {
/// The array of the placement that ran last, shared by the benchmarks of one register_placements call:
/// a placement's setup runs when one of its benchmarks starts after another placement's.
template <class T>
struct placement_slot {
    std::unique_ptr<placed_array<T>> array;
    std::size_t index = static_cast<std::size_t>(-1);
};
} // namespace detail

/// \effects registers one benchmark per placement, named `<name>/placement:<placement name>`. Each
/// runs: (untimed) the placement's array of `part.element_count()` T's, made and `init(array)`-ed when
/// the previous benchmark of this call used another placement (one array alive at a time); then
/// `body(state, array)`, the user's benchmark function (its `for (auto _ : state)` loop is the timed
/// region) inside an observation scope (`observe`); then the observation's counters per iteration and
/// the array's locality and pages per node against `array.layout()` (`add_locality_counters`).
/// `init` is `void(placed_array<T>&)`, `body` is `void(benchmark::State&, placed_array<T>&)`.
/// A placement that cannot be made (`unavailable()` says why, or making or initialising the array throws
/// a std::exception) skips its benchmark with the reason (`state.SkipWithError`: the JSON's
/// "error_message"); the other benchmarks run.
/// \returns the registered benchmarks, in `placements` order (add arguments, units, repetitions to them).
/// \throws invalid_placement when two placements share a name.
template <class T, class Init, class Body>
std::vector<::benchmark::internal::Benchmark*> register_placements(const std::string& name, const partition<T>& part,
                                                                   const std::vector<compared_placement>& placements,
                                                                   Init init, Body body, observe_options observe = {}) {
    detail::check_distinct_names(placements, "register_placements");
    auto slot = std::make_shared<detail::placement_slot<T>>();
    auto shared_init = std::make_shared<Init>(std::move(init));
    auto shared_body = std::make_shared<Body>(std::move(body));
    std::vector<::benchmark::internal::Benchmark*> made;
    for (std::size_t i = 0; i < placements.size(); ++i) {
        const compared_placement how = placements[i];
        made.push_back(::benchmark::RegisterBenchmark(
            (name + "/placement:" + how.name()).c_str(),
            [slot, shared_init, shared_body, how, i, part, observe](::benchmark::State& state) {
                if (slot->index != i) {
                    slot->array.reset(); // one array at a time
                    slot->index = static_cast<std::size_t>(-1);
                    // a placement that cannot be made skips its benchmark with the reason: never an
                    // exception out of the benchmark (it would end the process and lose every result)
                    std::string why = how.unavailable(part);
                    if (why.empty()) {
                        try {
                            slot->array = std::make_unique<placed_array<T>>(how, part);
                            (*shared_init)(*slot->array);
                            slot->index = i;
                        } catch (const std::exception& e) {
                            slot->array.reset();
                            why = e.what();
                        }
                    }
                    if (!why.empty()) {
                        state.SkipWithError(("placement " + how.name() + " not made: " + why).c_str());
                        return;
                    }
                }
                placed_array<T>& a = *slot->array;
                observation_scope scope(observe, std::defer_lock);
                scope.start();
                (*shared_body)(state, a);
                add_observation_counters(state, scope.stop());
                add_counters(state, locality_counters(a.locality()));
            }));
    }
    return made;
}

/// \effects `register_placements` over the matrix of a row partition (`rows.elements()`).
/// \returns the registered benchmarks. \throws invalid_placement when two placements share a name.
template <class T, class Init, class Body>
std::vector<::benchmark::internal::Benchmark*> register_placements(const std::string& name, const row_partition<T>& rows,
                                                                   const std::vector<compared_placement>& placements,
                                                                   Init init, Body body, observe_options observe = {}) {
    return register_placements(name, rows.elements(), placements, std::move(init), std::move(body), observe);
}

} // namespace numaplace

#endif
