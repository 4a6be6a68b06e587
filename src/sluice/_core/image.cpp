// Image headers and random crop windows for a whole batch, with the GIL released.
//
// jpeg_info walks each JPEG's marker segments to its frame header exactly as sluice.backends.image.formats does
// (jpeg_header, jpeg_scan_start) and checks its entropy-coded data as jpeg_scan_is_plausible does; anything it
// cannot judge (another format, a broken header) is left to the Python probe, which names the problem.
//
// random_crop_windows draws DALI's random crop windows exactly as sluice.ops.decoders.crop_window does with the
// sample's NumPy generator (Philox4x64-10 keyed by the operator's seed, counter (0, 0, sample, iteration)): the
// same doubles from the same counter blocks, the same libm calls in the same order, so the windows are equal.
#include <cmath>
#include <cstring>

#include "core.h"

namespace sluice {
namespace {

// ---------------------------------------------------------------------------------------------- JPEG headers
enum InfoColumn {
    kStatus,       // 0: a JPEG parsed here; 1: the Python probe decides (another format, broken header, ...)
    kHeight,
    kWidth,
    kComponents,
    kSubsampling,  // 0 gray, 1 444, 2 422, 3 420, 4 440, 5 411, 6 other
    kProgressive,  // not SOF0/SOF1 (progressive, lossless, arithmetic: nvJPEG's batched paths take none)
    kBaseline,     // SOF0
    kHasExif,      // an APP1 Exif segment precedes the frame header (the orientation is read in Python)
    kAdobe,        // the APP14 Adobe transform flag, -1 when absent
    kEndsWithEoi,  // an EOI marker lies in the last 1 KiB (a truncated file lacks it)
    kScanOk,       // the entropy-coded data holds only markers that may be there (1), or not (0); -1 not checked
    kColumns
};

int subsampling_code(int ncomp, const uint8_t* factors) {
    if (ncomp == 1) return 0;
    for (int c = 1; c < ncomp; ++c)
        if (factors[3 * c + 1] != 0x11) return 6;
    switch (factors[1]) {
        case 0x11: return 1;
        case 0x21: return 2;
        case 0x22: return 3;
        case 0x12: return 4;
        case 0x41: return 5;
        default: return 6;
    }
}

// Walks to the frame header; fills the row and returns true, or returns false (the Python probe decides).
bool walk_to_sof(const uint8_t* b, size_t n, int32_t* row) {
    if (n < 4 || b[0] != 0xFF || b[1] != 0xD8) return false;
    size_t pos = 2;
    bool exif = false;
    int adobe = -1;
    while (pos + 4 <= n) {
        if (b[pos] != 0xFF) return false;
        uint8_t marker = b[pos + 1];
        if (marker == 0xFF) {
            pos += 1;
            continue;
        }
        if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
            pos += 2;
            continue;
        }
        size_t length = (static_cast<size_t>(b[pos + 2]) << 8) | b[pos + 3];
        if (length < 2 || pos + 2 + length > n) return false;
        const uint8_t* seg = b + pos + 4;
        if (marker == 0xE1 && pos + 10 <= n && std::memcmp(seg, "Exif\0\0", 6) == 0) {
            exif = true;
        } else if (marker == 0xEE && length >= 14 && std::memcmp(seg, "Adobe", 5) == 0) {
            adobe = seg[11];
        } else if ((marker >= 0xC0 && marker <= 0xCF) && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
            if (length < 8) return false;
            int height = (seg[1] << 8) | seg[2], width = (seg[3] << 8) | seg[4], ncomp = seg[5];
            if (length < static_cast<size_t>(8 + 3 * ncomp)) return false;
            row[kHeight] = height;
            row[kWidth] = width;
            row[kComponents] = ncomp;
            row[kSubsampling] = subsampling_code(ncomp, seg + 6);
            row[kProgressive] = !(marker == 0xC0 || marker == 0xC1);
            row[kBaseline] = marker == 0xC0;
            row[kHasExif] = exif;
            row[kAdobe] = adobe;
            return true;
        } else if (marker == 0xDA || marker == 0xD9) {
            return false;
        }
        pos += 2 + length;
    }
    return false;
}

// (offset of the first entropy-coded byte, restart interval defined), or -1 when no SOS segment is found.
int64_t scan_start(const uint8_t* b, size_t n, bool* has_dri) {
    size_t pos = 2;
    *has_dri = false;
    while (pos + 4 <= n) {
        if (b[pos] != 0xFF) return -1;
        uint8_t marker = b[pos + 1];
        if (marker == 0xFF) {
            pos += 1;
            continue;
        }
        size_t length = (static_cast<size_t>(b[pos + 2]) << 8) | b[pos + 3];
        if (marker == 0xDD) *has_dri = length >= 4 && n >= pos + 6 && (b[pos + 4] | b[pos + 5]) != 0;
        if (marker == 0xDA) return static_cast<int64_t>(pos + 2 + length);
        pos += 2 + length;
    }
    return -1;
}

// jpeg_scan_is_plausible: no (FF, follower) pair inside the entropy-coded data with a follower that cannot be
// there (01-BF, a second SOI D8, restart markers D0-D7 without a restart interval).
bool scan_plausible(const uint8_t* b, size_t n) {
    bool dri;
    int64_t start = scan_start(b, n, &dri);
    if (start < 0 || static_cast<int64_t>(n) - start < 2) return false;
    const uint8_t* p = b + start;
    const uint8_t* end = b + n - 1;  // the last byte only follows
    while (p < end) {
        const uint8_t* ff = static_cast<const uint8_t*>(std::memchr(p, 0xFF, static_cast<size_t>(end - p)));
        if (ff == nullptr) break;
        uint8_t f = ff[1];
        if ((f >= 0x01 && f <= 0xBF) || f == 0xD8 || (!dri && f >= 0xD0 && f <= 0xD7)) return false;
        p = ff + 1;
    }
    return true;
}

bool ends_with_eoi(const uint8_t* b, size_t n) {
    size_t from = n > 1024 ? n - 1024 : 0;
    for (size_t i = n; i-- > from + 1;)
        if (b[i - 1] == 0xFF && b[i] == 0xD9) return true;
    return false;
}

py::array_t<int32_t> jpeg_info(py::buffer data, py::array_t<int64_t, py::array::c_style> offsets,
                               py::array_t<int64_t, py::array::c_style> sizes, bool check_scans) {
    Bytes buf = bytes_of(data, false);
    const size_t n = static_cast<size_t>(offsets.size());
    if (static_cast<size_t>(sizes.size()) != n) throw std::invalid_argument("jpeg_info: one size per offset");
    const int64_t* off = offsets.data();
    const int64_t* sz = sizes.data();
    for (size_t i = 0; i < n; ++i)
        if (off[i] < 0 || sz[i] < 0 || static_cast<uint64_t>(off[i] + sz[i]) > buf.size)
            throw std::invalid_argument("jpeg_info: a sample lies outside the buffer");
    py::array_t<int32_t> info({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(kColumns)});
    int32_t* out = info.mutable_data();
    {
        py::gil_scoped_release release;
        for (size_t i = 0; i < n; ++i) {
            int32_t* row = out + i * kColumns;
            std::fill(row, row + kColumns, 0);
            row[kAdobe] = -1;
            row[kScanOk] = -1;
            const uint8_t* b = buf.data + off[i];
            size_t len = static_cast<size_t>(sz[i]);
            if (!walk_to_sof(b, len, row)) {
                row[kStatus] = 1;
                continue;
            }
            row[kEndsWithEoi] = ends_with_eoi(b, len);
            if (check_scans) row[kScanOk] = scan_plausible(b, len);
        }
    }
    return info;
}

// ---------------------------------------------------------------------------------------------- crop windows
// random_crop_window of crop_window.py, draw for draw (Python's round() is nearbyint: ties to even).
void crop_window(const Philox& rng, int64_t H, int64_t W, double a_min, double a_max, double r_min, double r_max,
                 int64_t attempts, int64_t* out) {
    if (H <= 0 || W <= 0) {
        out[0] = out[1] = 0;
        out[2] = H > 0 ? H : 0;
        out[3] = W > 0 ? W : 0;
        return;
    }
    int64_t widest = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(H) * r_max));
    int64_t tallest = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(W) / r_min));
    double smallest_area = a_min * static_cast<double>(H) * static_cast<double>(W);
    int64_t h, w;
    uint64_t pos;  // index of the first of the two position draws
    if (static_cast<double>(H * widest) < smallest_area) {
        h = H, w = widest, pos = 0;
    } else if (static_cast<double>(W * tallest) < smallest_area) {
        h = tallest, w = W, pos = 0;
    } else {
        double log_lo = std::log(r_min), log_hi = std::log(r_max);
        bool found = false;
        h = w = 1;
        for (int64_t k = 0; k < attempts; ++k) {
            double area = (a_min + (a_max - a_min) * rng.uniform(2 * k)) * static_cast<double>(H) * static_cast<double>(W);
            double ratio = std::exp(log_lo + (log_hi - log_lo) * rng.uniform(2 * k + 1));
            w = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(std::sqrt(area * ratio))));
            h = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(std::sqrt(area / ratio))));
            double aspect = static_cast<double>(w) / static_cast<double>(h);
            if (w <= W && h <= H && r_min <= aspect && aspect <= r_max) {
                found = true;
                break;
            }
        }
        if (!found) {
            double image_ratio = static_cast<double>(W) / static_cast<double>(H);
            if (image_ratio > r_max) {
                h = H, w = widest;
            } else if (image_ratio < r_min) {
                h = tallest, w = W;
            } else {
                h = H, w = W;
            }
            double shrink = std::sqrt(std::min(1.0, a_max * static_cast<double>(H) * static_cast<double>(W) /
                                                        static_cast<double>(h * w)));
            h = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(h) * shrink));
            w = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(w) * shrink));
        }
        pos = static_cast<uint64_t>(2 * attempts);
    }
    h = std::min(h, H);
    w = std::min(w, W);
    double u = rng.uniform(pos), v = rng.uniform(pos + 1);
    out[0] = std::min(static_cast<int64_t>(u * static_cast<double>(H - h + 1)), H - h);
    out[1] = std::min(static_cast<int64_t>(v * static_cast<double>(W - w + 1)), W - w);
    out[2] = h;
    out[3] = w;
}

py::array_t<int64_t> random_crop_windows(uint64_t seed, uint64_t iteration,
                                         py::array_t<int64_t, py::array::c_style> heights,
                                         py::array_t<int64_t, py::array::c_style> widths, double a_min,
                                         double a_max, double r_min, double r_max, int64_t attempts) {
    const size_t n = static_cast<size_t>(heights.size());
    if (static_cast<size_t>(widths.size()) != n) throw std::invalid_argument("random_crop_windows: one width per height");
    py::array_t<int64_t> out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(4)});
    int64_t* o = out.mutable_data();
    const int64_t* hs = heights.data();
    const int64_t* ws = widths.data();
    {
        py::gil_scoped_release release;
        for (size_t i = 0; i < n; ++i) {
            Philox rng{{0, 0, static_cast<uint64_t>(i + 1), iteration}, {seed, 0}};  // sample i's generator
            crop_window(rng, hs[i], ws[i], a_min, a_max, r_min, r_max, attempts, o + 4 * i);
        }
    }
    return out;
}

}  // namespace

void register_image(py::module_& m) {
    m.def("jpeg_info", &jpeg_info, py::arg("data"), py::arg("offsets"), py::arg("sizes"), py::arg("check_scans"),
          "Frame-header facts of a batch of JPEGs as an (n, 11) int32 array (see sluice.native.image).");
    m.def("random_crop_windows", &random_crop_windows, py::arg("seed"), py::arg("iteration"), py::arg("heights"),
          py::arg("widths"), py::arg("a_min"), py::arg("a_max"), py::arg("r_min"), py::arg("r_max"),
          py::arg("attempts"), "Random crop windows (y, x, h, w) of a batch, as crop_window.py draws them.");
}

}  // namespace sluice
