// signal.cpp: per-sample signal analysis over a whole packed batch, the GIL released (sluice.native.signal).
//
// nonsilent_region: for each 1-D signal (a run of a packed buffer), the short-term power of every window of
// `window` samples (the mean of x^2, from running sums of x^2 in double, in index order: NumPy's cumsum and
// torch's CPU cumsum add in the same order, so the twin and the operator's torch function give the same bits),
// the reference (the largest power, or the one given), and the first and last windows at or above
// reference * factor (factor = 10^(cutoff_db / 10)).
#include "core.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice {
namespace {

// The window sums c[s + w] - c[s] of the running sums c[k] = sum_{i < k} x_i^2, walked forward with both running
// sums kept up to date: each is added in index order, so they equal the stored running sums of the twin to the bit,
// with no buffer to fill (a buffer of a signal's length, made per call, cost a page fault per 4 KiB of it).
template <typename T>
struct WindowSums {
    const T* x;
    int64_t w;
    double lo = 0.0, hi = 0.0;   // c[s] and c[s + w]
    int64_t s = 0;
    WindowSums(const T* x_, int64_t w_) : x(x_), w(w_) {
        for (int64_t i = 0; i < w; ++i) {
            const double v = static_cast<double>(x[i]);
            hi += v * v;
        }
    }
    double diff() const { return hi - lo; }
    void next() {
        const double a = static_cast<double>(x[s]), b = static_cast<double>(x[s + w]);
        lo += a * a;
        hi += b * b;
        ++s;
    }
};

template <typename T>
void nonsilent_one(const T* x, int64_t n, int64_t window_length, double factor, double reference, int32_t* begin,
                   int32_t* length) {
    *begin = 0;
    *length = 0;
    if (n <= 0) return;
    const int64_t w = std::max<int64_t>(1, std::min(n, window_length));
    const int64_t last_start = n - w;
    const double wd = static_cast<double>(w);
    double ref = reference;
    if (!(reference > 0)) {
        // The largest power: division by w > 0 is monotonic, so it is the largest sum divided by w. A NaN sum
        // makes the reference NaN (NumPy's max), and nothing is loud then.
        double top = -1.0;
        WindowSums<T> sums(x, w);
        for (;;) {
            const double d = sums.diff();
            if (!(d <= top)) {
                top = d;
                if (d != d) break;
            }
            if (sums.s == last_start) break;
            sums.next();
        }
        ref = top / wd;
    }
    if (!(ref > 0)) return;
    const double threshold = ref * factor;
    int64_t first = -1, last = -1;
    WindowSums<T> sums(x, w);
    for (;;) {
        if (sums.diff() / wd >= threshold) {
            if (first < 0) first = sums.s;
            last = sums.s;
        }
        if (sums.s == last_start) break;
        sums.next();
    }
    if (first < 0) return;
    *begin = static_cast<int32_t>(first);
    *length = static_cast<int32_t>(last + w - first);
}

template <typename T>
void nonsilent_batch(const py::array& data, const int64_t* offsets, const int64_t* lengths, size_t count,
                     int64_t window, double factor, double reference, int32_t* begin, int32_t* length) {
    const T* base = static_cast<const T*>(data.data());
    const int64_t total = static_cast<int64_t>(data.size());
    for (size_t i = 0; i < count; ++i) {
        if (offsets[i] < 0 || lengths[i] < 0 || offsets[i] + lengths[i] > total)
            throw std::out_of_range("nonsilent_region: sample " + std::to_string(i) + " lies outside the buffer");
    }
    py::gil_scoped_release release;
    for (size_t i = 0; i < count; ++i)
        nonsilent_one(base + offsets[i], lengths[i], window, factor, reference, begin + i, length + i);
}

py::tuple nonsilent_region(py::array data, py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets,
                           py::array_t<int64_t, py::array::c_style | py::array::forcecast> lengths, int64_t window,
                           double factor, double reference) {
    if (data.ndim() != 1 || !(data.flags() & py::array::c_style))
        throw std::invalid_argument("nonsilent_region: the buffer must be a contiguous 1-D array");
    if (offsets.size() != lengths.size())
        throw std::invalid_argument("nonsilent_region: offsets and lengths differ in size");
    if (window < 1) throw std::invalid_argument("nonsilent_region: window_length must be >= 1");
    const size_t n = static_cast<size_t>(offsets.size());
    py::array_t<int32_t> begin(static_cast<py::ssize_t>(n)), length(static_cast<py::ssize_t>(n));
    const int64_t* off = offsets.data();
    const int64_t* len = lengths.data();
    int32_t* b = begin.mutable_data();
    int32_t* l = length.mutable_data();
    const char kind = data.dtype().kind();
    const size_t size = static_cast<size_t>(data.itemsize());
    if (kind == 'f' && size == 4) nonsilent_batch<float>(data, off, len, n, window, factor, reference, b, l);
    else if (kind == 'f' && size == 8) nonsilent_batch<double>(data, off, len, n, window, factor, reference, b, l);
    else if (kind == 'i' && size == 1) nonsilent_batch<int8_t>(data, off, len, n, window, factor, reference, b, l);
    else if (kind == 'i' && size == 2) nonsilent_batch<int16_t>(data, off, len, n, window, factor, reference, b, l);
    else if (kind == 'i' && size == 4) nonsilent_batch<int32_t>(data, off, len, n, window, factor, reference, b, l);
    else if (kind == 'i' && size == 8) nonsilent_batch<int64_t>(data, off, len, n, window, factor, reference, b, l);
    else if (kind == 'u' && size == 1) nonsilent_batch<uint8_t>(data, off, len, n, window, factor, reference, b, l);
    else if (kind == 'u' && size == 2) nonsilent_batch<uint16_t>(data, off, len, n, window, factor, reference, b, l);
    else if (kind == 'u' && size == 4) nonsilent_batch<uint32_t>(data, off, len, n, window, factor, reference, b, l);
    else throw std::invalid_argument("nonsilent_region: unsupported sample type");
    return py::make_tuple(begin, length);
}

}  // namespace

void register_signal(py::module_& m) {
    m.def("nonsilent_region", &nonsilent_region, py::arg("data"), py::arg("offsets"), py::arg("lengths"),
          py::arg("window"), py::arg("factor"), py::arg("reference"),
          "(begin, length) int32 arrays of the non-silent part of each signal data[offsets[i]: offsets[i] + "
          "lengths[i]] (see sluice.native.signal.nonsilent_region).");
}

}  // namespace sluice
