// Separable antialiased resampling of uint8 HWC images, a batch (or a share of one) per call, GIL released.
//
// The algorithm is sluice.kernels.resample's (Pillow's, in float32): per axis a filter table from float64
// formulas, the filter widened by the scale when shrinking with antialias, taps outside the image dropped and
// the rest renormalised; the horizontal pass on the rows the vertical pass needs, then the vertical pass, both
// accumulating float32 products; rounding half away from zero and saturation to uint8 last. The arithmetic is
// fixed to the operation, in the order sluice.native.resize's NumPy twin does it, so both give identical bytes:
// weights summed tap by tap, weight / sum in float64 then rounded to float32, acc = acc + float(x) * w tap by tap
// (no fused multiply-add: setup.py builds with -ffp-contract=off), sin and exp from the C library as Python's
// math module calls them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core.h"

namespace sluice {
namespace {

// Filter ids of sluice.kernels.resample.FILTER_IDS and their radii before antialias widening.
enum Filter { kNearest = 0, kLinear = 1, kCubic = 2, kLanczos3 = 3, kGaussian = 4, kTriangular = 5 };
const double kRadius[] = {0.5, 1.0, 2.0, 3.0, 1.5, 1.0};
const double kPi = 3.141592653589793;  // numpy.pi

double gaussian_floor() {
    volatile double at_radius = -4.5;  // at run time: glibc's exp, as Python's math.exp(-4.5), not a folded constant
    return std::exp(at_radius);
}

double weight(int fid, double d) {
    const double a = std::fabs(d);
    switch (fid) {
        case kLinear:
            return std::max(0.0, 1.0 - a);
        case kCubic: {
            const double c = -0.5;
            if (a < 1.0) return ((c + 2.0) * a - (c + 3.0)) * a * a + 1.0;
            return a < 2.0 ? (((a - 5.0) * a + 8.0) * a - 4.0) * c : 0.0;
        }
        case kLanczos3: {
            if (a >= 3.0) return 0.0;
            if (a < 1e-8) return 1.0;
            const double px = kPi * d;
            return 3.0 * std::sin(px) * std::sin(px / 3.0) / (px * px);
        }
        case kGaussian: {
            static const double floor_value = gaussian_floor();
            return std::max(std::exp(-2.0 * a * a) - floor_value, 0.0);
        }
        default:
            return 0.0;
    }
}

// One axis: output pixel o reads count[o] consecutive source pixels from first[o] with weights w[o * taps ...].
struct Table {
    int taps = 1;
    std::vector<int> first, count;
    std::vector<float> w;
};

// The source pixel under a centre, clamped to the image (INTERP_NN, and regions outside the image).
int nearest(double centre, int in_size) {
    return static_cast<int>(std::min(std::max(std::floor(centre), 0.0), static_cast<double>(in_size - 1)));
}

// sluice.native.resize.axis_table in C++ (the same float64 arithmetic, in the same order).
void make_table(double lo, double hi, int in_size, int out_size, int fid, bool antialias, Table* t) {
    const double scale = (hi - lo) / out_size;
    t->first.assign(out_size, 0);
    t->count.assign(out_size, 1);
    if (fid == kNearest) {
        t->taps = 1;
        t->w.assign(out_size, 1.0f);
        for (int o = 0; o < out_size; ++o) {
            const double centre = lo + (static_cast<double>(o) + 0.5) * scale;
            t->first[o] = nearest(centre, in_size);
        }
        return;
    }
    if (fid == kTriangular) {
        fid = kLinear;
        antialias = true;
    }
    const double fscale = antialias ? std::max(std::fabs(scale), 1.0) : 1.0;
    const double support = kRadius[fid] * fscale;
    const int taps = static_cast<int>(std::ceil(support)) * 2 + 1;
    t->taps = taps;
    t->w.assign(static_cast<size_t>(out_size) * taps, 0.0f);
    std::vector<double> ws(taps);
    for (int o = 0; o < out_size; ++o) {
        const double centre = lo + (static_cast<double>(o) + 0.5) * scale;
        const double xmin = std::floor(centre - support + 0.5);
        const double xend = std::floor(centre + support + 0.5);
        double total = 0.0;
        int lo_tap = taps, hi_tap = -1;
        for (int k = 0; k < taps; ++k) {
            const double xs = xmin + k;
            const bool valid = xs >= 0 && xs < in_size && xs < xend;
            ws[k] = valid ? weight(fid, (xs + 0.5 - centre) / fscale) : 0.0;
            total = total + ws[k];
            if (ws[k] != 0.0) {
                lo_tap = std::min(lo_tap, k);
                hi_tap = k;
            }
        }
        float* w = &t->w[static_cast<size_t>(o) * taps];
        if (std::fabs(total) < 1e-12) {  // the region lies outside the image: the nearest edge pixel
            t->first[o] = nearest(centre, in_size);
            w[0] = 1.0f;
            continue;
        }
        // Zero-weight taps add +-0 to a sum: only the stretch between the first and last non-zero tap is kept.
        t->first[o] = static_cast<int>(xmin) + lo_tap;
        t->count[o] = hi_tap - lo_tap + 1;
        for (int k = lo_tap; k <= hi_tap; ++k) w[k - lo_tap] = static_cast<float>(ws[k] / total);
    }
}

// Horizontal pass over one source row: dst[o * C + c] = sum_k float(src[(first[o] + k) * C + c]) * w[o][k].
template <int C>
void horizontal_row(const uint8_t* src, const Table& t, int out_w, int channels, float* dst) {
    const int ch = C > 0 ? C : channels;
    float acc[8];
    for (int o = 0; o < out_w; ++o) {
        const uint8_t* s = src + static_cast<size_t>(t.first[o]) * ch;
        const float* w = &t.w[static_cast<size_t>(o) * t.taps];
        for (int c = 0; c < ch; ++c) acc[c] = 0.0f;
        for (int k = 0; k < t.count[o]; ++k, s += ch)
            for (int c = 0; c < ch; ++c) acc[c] = acc[c] + static_cast<float>(s[c]) * w[k];
        for (int c = 0; c < ch; ++c) dst[static_cast<size_t>(o) * ch + c] = acc[c];
    }
}

inline uint8_t round_u8(float v) {
    // sluice.kernels.resample.cast_round: halves away from zero, saturated; below 0 it always gives 0. For
    // 0 <= t < 255 truncation is floor(t) (no libm call: x86-64's baseline SSE2 has no floor instruction).
    if (!(v >= 0.0f)) return 0;
    const float t = v + 0.5f;
    return t >= 255.0f ? 255 : static_cast<uint8_t>(static_cast<int>(t));
}

struct Image {
    const uint8_t* data;
    int h, w, c;
};

struct Scratch {
    Table ty, tx;
    std::vector<int> slot;  // source row -> its row of `rows` (-1: not needed)
    std::vector<float> rows, acc;
};

void resize_one(const Image& im, const double* roi, int oh, int ow, int fmin, int fmag, bool antialias,
                uint8_t* out, Scratch* s) {
    const double y0 = roi[0], x0 = roi[1], y1 = roi[2], x1 = roi[3];
    const int fy = std::fabs(y1 - y0) > oh ? fmin : fmag;
    const int fx = std::fabs(x1 - x0) > ow ? fmin : fmag;
    make_table(y0, y1, im.h, oh, fy, antialias, &s->ty);
    make_table(x0, x1, im.w, ow, fx, antialias, &s->tx);
    const int c = im.c;
    const size_t row_len = static_cast<size_t>(ow) * c;
    s->slot.assign(im.h, -1);
    int used = 0;
    for (int o = 0; o < oh; ++o)
        for (int k = 0; k < s->ty.count[o]; ++k) {
            int& slot = s->slot[s->ty.first[o] + k];
            if (slot < 0) slot = used++;
        }
    s->rows.resize(static_cast<size_t>(used) * row_len);
    for (int r = 0; r < im.h; ++r) {
        if (s->slot[r] < 0) continue;
        const uint8_t* src = im.data + static_cast<size_t>(r) * im.w * c;
        float* dst = &s->rows[static_cast<size_t>(s->slot[r]) * row_len];
        switch (c) {
            case 1: horizontal_row<1>(src, s->tx, ow, c, dst); break;
            case 3: horizontal_row<3>(src, s->tx, ow, c, dst); break;
            case 4: horizontal_row<4>(src, s->tx, ow, c, dst); break;
            default: horizontal_row<0>(src, s->tx, ow, c, dst); break;
        }
    }
    s->acc.resize(row_len);
    float* acc = s->acc.data();
    for (int o = 0; o < oh; ++o) {
        std::fill(acc, acc + row_len, 0.0f);
        const float* w = &s->ty.w[static_cast<size_t>(o) * s->ty.taps];
        for (int k = 0; k < s->ty.count[o]; ++k) {
            const float* src = &s->rows[static_cast<size_t>(s->slot[s->ty.first[o] + k]) * row_len];
            const float wk = w[k];
            for (size_t j = 0; j < row_len; ++j) acc[j] = acc[j] + src[j] * wk;
        }
        uint8_t* dst = out + static_cast<size_t>(o) * row_len;
        for (size_t j = 0; j < row_len; ++j) dst[j] = round_u8(acc[j]);
    }
}

bool filter_ok(int f) { return f >= kNearest && f <= kTriangular; }

// Resamples images[i] (uint8, HW or HWC, C-contiguous) from the region rois[i] = (y0, x0, y1, x1) to
// out_sizes[i] = (oh, ow) into out[out_offsets[i]:] as HWC rows. Samples are taken in turn from `counter` when
// given (one int64 shared with calls in other threads), else all of them.
void resize_batch(const py::sequence& images, py::array_t<double, py::array::c_style> rois,
                  py::array_t<int64_t, py::array::c_style> out_sizes, int min_filter, int mag_filter, bool antialias,
                  py::buffer out_buf, py::array_t<int64_t, py::array::c_style> out_offsets, py::object counter_obj) {
    const size_t n = py::len(images);
    if (rois.ndim() != 2 || static_cast<size_t>(rois.shape(0)) != n || rois.shape(1) != 4 || out_sizes.ndim() != 2 ||
        static_cast<size_t>(out_sizes.shape(0)) != n || out_sizes.shape(1) != 2 ||
        static_cast<size_t>(out_offsets.size()) != n)
        throw std::invalid_argument("resize: rois (n, 4), out_sizes (n, 2) and out_offsets (n) need one row per "
                                    "image");
    if (!filter_ok(min_filter) || !filter_ok(mag_filter))
        throw std::invalid_argument("resize: filter ids are 0 (nn) to 5 (triangular)");
    Bytes out = bytes_of(out_buf, true);
    const int64_t* sz = out_sizes.data();
    const int64_t* off = out_offsets.data();
    std::vector<py::buffer_info> views;
    std::vector<Image> ims(n);
    views.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        views.push_back(py::reinterpret_borrow<py::buffer>(images[i]).request());
        const py::buffer_info& b = views.back();
        const int c = b.ndim == 3 ? static_cast<int>(b.shape[2]) : 1;
        if (b.itemsize != 1 || (b.ndim != 2 && b.ndim != 3) || b.shape[0] < 1 || b.shape[1] < 1 || c < 1 || c > 8 ||
            b.strides[b.ndim - 1] != 1 || b.strides[1] != c || b.strides[0] != b.shape[1] * c)
            throw std::invalid_argument(
                "resize: images must be non-empty C-contiguous uint8 HW or HWC arrays (C <= 8)");
        const int64_t need = sz[2 * i] * sz[2 * i + 1] * c;
        if (sz[2 * i] < 1 || sz[2 * i + 1] < 1 || off[i] < 0 || static_cast<uint64_t>(off[i] + need) > out.size)
            throw std::invalid_argument("resize: an output size is empty or an output lies outside `out`");
        ims[i] = Image{static_cast<const uint8_t*>(b.ptr), static_cast<int>(b.shape[0]),
                       static_cast<int>(b.shape[1]), c};
    }
    int64_t* counter = nullptr;
    if (!counter_obj.is_none()) {
        auto c = counter_obj.cast<py::array_t<int64_t, py::array::c_style>>();
        if (c.size() != 1 || !c.writeable()) throw std::invalid_argument("resize: counter is one int64");
        counter = c.mutable_data();
    }
    const double* roi = rois.data();
    {
        py::gil_scoped_release release;
        Scratch scratch;
        size_t next = 0;
        for (;;) {
            size_t i = counter ? static_cast<size_t>(__atomic_fetch_add(counter, 1, __ATOMIC_RELAXED)) : next++;
            if (i >= n) break;
            resize_one(ims[i], roi + 4 * i, static_cast<int>(sz[2 * i]), static_cast<int>(sz[2 * i + 1]), min_filter,
                       mag_filter, antialias, out.data + off[i], &scratch);
        }
    }
}

}  // namespace

void register_resize(py::module_& m) {
    m.def("resize", &resize_batch, py::arg("images"), py::arg("rois"), py::arg("out_sizes"), py::arg("min_filter"),
          py::arg("mag_filter"), py::arg("antialias"), py::arg("out"), py::arg("out_offsets"),
          py::arg("counter") = py::none(),
          "Resample uint8 HW/HWC images from ROIs (y0, x0, y1, x1) to (oh, ow) into out at out_offsets.");
}

}  // namespace sluice
