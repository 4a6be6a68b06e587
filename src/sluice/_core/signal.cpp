// signal.cpp: per-sample signal analysis over a whole packed batch, the GIL released (sluice.native.signal).
//
// nonsilent_region: for each 1-D signal (a run of a packed buffer), the short-term power of every window of
// `window` samples (the mean of x^2, from running sums of x^2 in double: see running_sums),
// the reference (the largest power, or the one given), and the first and last windows at or above
// reference * factor (factor = 10^(cutoff_db / 10)).
#include "core.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice {
namespace {

double d_nan() { return std::numeric_limits<double>::quiet_NaN(); }

// c[k], k = 0..n: the running sums of x^2 as sluice defines them (sluice.native.signal): four sums, one per residue
// of the index mod 4, each added in index order, then combined as (A0 + A1) + (A2 + A3). Four chains of additions
// instead of one: the adds of one chain no longer wait for each other (2.5 -> ~1 ns a sample).
template <typename T>
void running_sums(const T* x, int64_t n, double* c) {
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    c[0] = 0.0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const double v0 = static_cast<double>(x[i]), v1 = static_cast<double>(x[i + 1]);
        const double v2 = static_cast<double>(x[i + 2]), v3 = static_cast<double>(x[i + 3]);
        a0 += v0 * v0;
        c[i + 1] = (a0 + a1) + (a2 + a3);
        a1 += v1 * v1;
        c[i + 2] = (a0 + a1) + (a2 + a3);
        a2 += v2 * v2;
        c[i + 3] = (a0 + a1) + (a2 + a3);
        a3 += v3 * v3;
        c[i + 4] = (a0 + a1) + (a2 + a3);
    }
    double* a[4] = {&a0, &a1, &a2, &a3};
    for (; i < n; ++i) {
        const double v = static_cast<double>(x[i]);
        *a[i & 3] += v * v;
        c[i + 1] = (a0 + a1) + (a2 + a3);
    }
}

// The largest window sum c[s + w] - c[s], s = 0..last, or NaN when one is NaN (NumPy's max; nothing is loud then).
// The sums only grow, so while the last is finite every difference is a number: four maxima side by side then.
double largest_sum(const double* c, int64_t w, int64_t last) {
    double t0 = -1.0, t1 = -1.0, t2 = -1.0, t3 = -1.0;
    int64_t s = 0;
    if (std::isfinite(c[last + w])) {
        for (; s + 4 <= last + 1; s += 4) {
            t0 = std::max(t0, c[s + w] - c[s]);
            t1 = std::max(t1, c[s + 1 + w] - c[s + 1]);
            t2 = std::max(t2, c[s + 2 + w] - c[s + 2]);
            t3 = std::max(t3, c[s + 3 + w] - c[s + 3]);
        }
    }
    for (; s <= last; ++s) {
        const double d = c[s + w] - c[s];
        if (d != d) return d_nan();
        t0 = std::max(t0, d);
    }
    return std::max(std::max(t0, t1), std::max(t2, t3));
}

// One pass makes the running sums c[k] (running_sums: the twin and the torch function compute the same bits) in a
// buffer each thread keeps and grows (a buffer made per call cost a page
// fault per 4 KiB of it); the largest window sum is then found with no division (dividing by w > 0 is monotonic: the
// largest power is the largest sum over w), and the first and last loud windows by scans from each end, which stop
// at the speech.
template <typename T>
void nonsilent_one(const T* x, int64_t n, int64_t window_length, double factor, double reference, int32_t* begin,
                   int32_t* length) {
    *begin = 0;
    *length = 0;
    if (n <= 0) return;
    thread_local std::vector<double> sums;
    if (sums.size() < static_cast<size_t>(n) + 1) sums.resize(static_cast<size_t>(n) + 1);
    double* c = sums.data();
    running_sums(x, n, c);
    const int64_t w = std::max<int64_t>(1, std::min(n, window_length));
    const int64_t last_start = n - w;
    const double wd = static_cast<double>(w);
    double ref = reference;
    if (!(reference > 0)) ref = largest_sum(c, w, last_start) / wd;
    if (!(ref > 0)) return;
    const double threshold = ref * factor;
    int64_t first = 0;
    while (first <= last_start && !((c[first + w] - c[first]) / wd >= threshold)) ++first;
    if (first > last_start) return;
    int64_t last = last_start;
    while (last > first && !((c[last + w] - c[last]) / wd >= threshold)) --last;
    *begin = static_cast<int32_t>(first);
    *length = static_cast<int32_t>(last + w - first);
}

template <typename T>
void nonsilent_all(const py::array& data, const int64_t* offsets, const int64_t* lengths, size_t n, WorkerPool* pool,
                   int64_t window, double factor, double reference, int32_t* begin, int32_t* length) {
    const T* base = static_cast<const T*>(data.data());
    py::gil_scoped_release release;
    auto one = [&](size_t i) {
        nonsilent_one(base + offsets[i], lengths[i], window, factor, reference, begin + i, length + i);
    };
    if (pool != nullptr) {
        pool->run(n, one);
    } else {
        for (size_t i = 0; i < n; ++i) one(i);
    }
}

using Int64s = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// Signal i = data[offsets[i] : offsets[i] + lengths[i]]: (begin, length) int32 arrays, the signals analysed on the
// pool's threads (None: the calling thread alone).
py::tuple nonsilent_region(py::array data, Int64s offsets, Int64s lengths, int64_t window, double factor,
                           double reference, py::object pool) {
    if (data.ndim() != 1 || !(data.flags() & py::array::c_style))
        throw std::invalid_argument("nonsilent_region: the buffer must be a contiguous 1-D array");
    const size_t n = static_cast<size_t>(offsets.size());
    if (static_cast<size_t>(lengths.size()) != n)
        throw std::invalid_argument("nonsilent_region: offsets and lengths differ in size");
    if (window < 1) throw std::invalid_argument("nonsilent_region: window_length must be >= 1");
    const int64_t* off = offsets.data();
    const int64_t* len = lengths.data();
    const int64_t total = static_cast<int64_t>(data.size());
    for (size_t i = 0; i < n; ++i) {
        if (off[i] < 0 || len[i] < 0 || off[i] + len[i] > total)
            throw std::out_of_range("nonsilent_region: sample " + std::to_string(i) + " lies outside the buffer");
    }
    py::array_t<int32_t> begin(static_cast<py::ssize_t>(n)), length(static_cast<py::ssize_t>(n));
    int32_t* b = begin.mutable_data();
    int32_t* l = length.mutable_data();
    WorkerPool* workers = pool_of(pool);
    const char kind = data.dtype().kind();
    const size_t size = static_cast<size_t>(data.itemsize());
#define NONSILENT_ALL(T) nonsilent_all<T>(data, off, len, n, workers, window, factor, reference, b, l)
    if (kind == 'f' && size == 4) NONSILENT_ALL(float);
    else if (kind == 'f' && size == 8) NONSILENT_ALL(double);
    else if (kind == 'i' && size == 1) NONSILENT_ALL(int8_t);
    else if (kind == 'i' && size == 2) NONSILENT_ALL(int16_t);
    else if (kind == 'i' && size == 4) NONSILENT_ALL(int32_t);
    else if (kind == 'i' && size == 8) NONSILENT_ALL(int64_t);
    else if (kind == 'u' && size == 1) NONSILENT_ALL(uint8_t);
    else if (kind == 'u' && size == 2) NONSILENT_ALL(uint16_t);
    else if (kind == 'u' && size == 4) NONSILENT_ALL(uint32_t);
    else throw std::invalid_argument("nonsilent_region: unsupported sample type");
#undef NONSILENT_ALL
    return py::make_tuple(begin, length);
}

}  // namespace

void register_signal(py::module_& m) {
    m.def("nonsilent_region", &nonsilent_region, py::arg("data"), py::arg("offsets"), py::arg("lengths"),
          py::arg("window"), py::arg("factor"), py::arg("reference"), py::arg("pool") = py::none(),
          "(begin, length) int32 arrays of the non-silent part of each signal data[offsets[i]: offsets[i] + "
          "lengths[i]], on the pool's threads (see sluice.native.signal.nonsilent_region).");
}

}  // namespace sluice
