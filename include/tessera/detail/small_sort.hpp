#pragma once
// A stable insertion sort for the short lists of reports and memory plans (tens to hundreds of
// items): a few lines to instantiate, where std::stable_sort instantiates a merge sort with its buffer
// in every header that sorts. Below every layer.
#include <cstddef>
#include <utility>
#include <vector>

namespace tessera::detail {

/// Sorts `items` so that `before(a, b)` holds for no b placed before a; equal items keep their order.
template <class T, class Before>
void small_stable_sort(std::vector<T>& items, Before before) {
    for (std::size_t i = 1; i < items.size(); ++i) {
        T item = std::move(items[i]);
        std::size_t j = i;
        for (; j > 0 && before(item, items[j - 1]); --j) items[j] = std::move(items[j - 1]);
        items[j] = std::move(item);
    }
}

}  // namespace tessera::detail
