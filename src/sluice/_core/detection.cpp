// The per-sample host work of the detection operators for a whole batch, with the GIL released.
//
// random_bbox_crops draws random_bbox_crop's windows exactly as sluice.native.bbox_crop.random_bbox_crop_sample
// does with the sample's NumPy generator (Philox4x64-10 keyed by the operator's seed, counter (0, 0, sample,
// iteration)): the same draws in the same order, the same double arithmetic, so the windows and kept boxes are equal.
//
// encode_boxes is box_encoder's matching (sluice.ops.detection.box_encoder.match_boxes) in float32: each box's best
// anchor (ties: the last) is forced to IoU 2, each anchor takes its best box (ties: the last), matched above the
// criteria; the same float operations as the torch reference, one pass over the boxes and anchors of each sample;
// then each anchor's output row (its box's or its own centre and size) and label, written in the same pass.
#include <cmath>
#include <limits>

#include "core.h"

namespace sluice {
namespace {

// ------------------------------------------------------------------------------------------ random_bbox_crop
struct CropParams {
    std::vector<double> thresholds;
    bool allow_no_crop;
    double s_lo, s_hi, r_lo, r_hi;
    int64_t num_attempts, total_num_attempts;
    bool prune_by_overlap;  // else: keep boxes whose centre lies in the window
    double prune_threshold;
    bool iou;               // else: intersection / box area
    bool all_boxes;
    bool fixed;             // a fixed window size: fw, fh normalised, integer anchors over in0 - cs0, in1 - cs1
    double fw, fh, in0, in1;
    int64_t span0, span1;   // int(input_shape - crop_shape)
};

constexpr int64_t kGuardAttempts = 100000;  // _GUARD_ATTEMPTS of bbox_crop.py

// _metric of bbox_crop.py for one box.
inline double metric(const double* b, const double* c, bool iou) {
    double ix0 = std::max(b[0], c[0]), iy0 = std::max(b[1], c[1]);
    double ix1 = std::min(b[2], c[2]), iy1 = std::min(b[3], c[3]);
    double w = ix1 - ix0, h = iy1 - iy0;
    w = w < 0 ? 0.0 : w;
    h = h < 0 ? 0.0 : h;
    double inter = w * h;
    double area = (b[2] - b[0]) * (b[3] - b[1]);
    if (!iou) return area > 0 ? inter / area : 0.0;
    double uni = area + (c[2] - c[0]) * (c[3] - c[1]) - inter;
    return uni > 0 ? inter / uni : 0.0;
}

inline bool kept(const double* b, const double* c, const CropParams& p) {
    if (p.prune_by_overlap) return metric(b, c, false) >= p.prune_threshold;
    double cx = (b[0] + b[2]) / 2, cy = (b[1] + b[3]) / 2;
    return cx >= c[0] && cx <= c[2] && cy >= c[1] && cy <= c[3];
}

// One sample: writes the window (x0, y0, x1, y1), returns 0 (a window), 1 (no crop chosen) or 2 (gave up).
int crop_one(NumpyStream& rng, const double* boxes, int64_t m, const CropParams& p, double* crop, int64_t* tried_out) {
    const int64_t n_opt = static_cast<int64_t>(p.thresholds.size()) + (p.allow_no_crop ? 1 : 0);
    const int64_t limit = p.total_num_attempts > 0 ? p.total_num_attempts : kGuardAttempts;
    int64_t tried = 0;
    while (tried < limit) {
        int64_t opt = rng.integers(n_opt);
        if (opt == static_cast<int64_t>(p.thresholds.size())) {  // "no crop"
            *tried_out = tried;
            return 1;
        }
        const double thr = p.thresholds[static_cast<size_t>(opt)];
        for (int64_t k = 0; k < p.num_attempts; ++k) {
            if (++tried > limit) break;
            double w, h, x0, y0;
            if (p.fixed) {
                w = p.fw, h = p.fh;
                x0 = static_cast<double>(rng.integers(p.span0 + 1)) / p.in0;
                y0 = static_cast<double>(rng.integers(p.span1 + 1)) / p.in1;
            } else {
                w = rng.uniform(p.s_lo, p.s_hi);
                h = rng.uniform(p.s_lo, p.s_hi);
                if (p.r_lo == p.r_hi) {  // _fix_aspect_ratio
                    double largest = std::max(w, h);
                    if (w != h) {
                        if (rng.integers(2)) w = h * p.r_lo;
                        else h = w / p.r_lo;
                    }
                    double scale = largest / std::max(w, h);
                    w = w * scale, h = h * scale;
                } else {
                    double r = w / h;
                    if (!(p.r_lo <= r && r <= p.r_hi)) continue;
                }
                x0 = rng.uniform(0.0, 1.0 - w);
                y0 = rng.uniform(0.0, 1.0 - h);
            }
            double cand[4] = {x0, y0, x0 + w, y0 + h};
            if (m) {
                bool all = true, any = false, keeps = false;
                for (int64_t j = 0; j < m; ++j) {
                    bool ok = metric(boxes + 4 * j, cand, p.iou) >= thr;
                    all = all && ok;
                    any = any || ok;
                }
                if (!(p.all_boxes ? all : any)) continue;
                for (int64_t j = 0; j < m && !keeps; ++j) keeps = kept(boxes + 4 * j, cand, p);
                if (!keeps) continue;  // a window that keeps no box is rejected
            }
            std::memcpy(crop, cand, sizeof(cand));
            *tried_out = tried;
            return 0;
        }
    }
    *tried_out = tried;
    return 2;
}

// Windows of a batch: ltrb (total, 4) float64 boxes, counts per sample, generator counters per sample. Returns
// (crops (n, 4) float64, status (n,) int8: 0 window, 1 no crop, 2 gave up; tried (n,) int64, keep (total,) bool).
py::tuple random_bbox_crops(uint64_t seed, uint64_t iteration, py::array_t<double, py::array::c_style> ltrb,
                            py::array_t<int64_t, py::array::c_style> counts,
                            py::array_t<int64_t, py::array::c_style> streams, std::vector<double> thresholds,
                            bool allow_no_crop, double s_lo, double s_hi, double r_lo, double r_hi,
                            int64_t num_attempts, int64_t total_num_attempts, bool prune_by_overlap,
                            double prune_threshold, bool iou, bool all_boxes, bool fixed, double fw, double fh,
                            double in0, double in1, int64_t span0, int64_t span1) {
    const size_t n = static_cast<size_t>(counts.size());
    if (static_cast<size_t>(streams.size()) != n) throw std::invalid_argument("random_bbox_crops: one stream per sample");
    const int64_t* cnt = counts.data();
    int64_t total = 0;
    for (size_t i = 0; i < n; ++i) total += cnt[i];
    if (ltrb.size() != 4 * total) throw std::invalid_argument("random_bbox_crops: ltrb must hold 4 values per box");
    if (thresholds.size() + (allow_no_crop ? 1 : 0) == 0 || num_attempts < 1)
        throw std::invalid_argument("random_bbox_crops: nothing to choose");
    if (fixed && (span0 < 0 || span1 < 0 || span0 >= 0xFFFFFFFFLL || span1 >= 0xFFFFFFFFLL))
        throw std::invalid_argument("random_bbox_crops: input_shape - crop_shape out of range");
    CropParams p{thresholds, allow_no_crop, s_lo, s_hi, r_lo, r_hi, num_attempts, total_num_attempts,
                 prune_by_overlap, prune_threshold, iou, all_boxes, fixed, fw, fh, in0, in1, span0, span1};
    py::array_t<double> crops({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(4)});
    py::array_t<int8_t> status(static_cast<py::ssize_t>(n));
    py::array_t<int64_t> tried(static_cast<py::ssize_t>(n));
    py::array_t<bool> keep(static_cast<py::ssize_t>(total));
    double* c = crops.mutable_data();
    int8_t* st = status.mutable_data();
    int64_t* tr = tried.mutable_data();
    bool* kp = keep.mutable_data();
    const double* b = ltrb.data();
    const int64_t* ids = streams.data();
    {
        py::gil_scoped_release release;
        int64_t start = 0;
        for (size_t i = 0; i < n; ++i) {
            NumpyStream rng{Philox{{0, 0, static_cast<uint64_t>(ids[i]), iteration}, {seed, 0}}};
            const double* boxes = b + 4 * start;
            double* crop = c + 4 * i;
            int s = crop_one(rng, boxes, cnt[i], p, crop, tr + i);
            st[i] = static_cast<int8_t>(s);
            if (s != 0) {
                crop[0] = crop[1] = 0.0;
                crop[2] = crop[3] = 1.0;
            }
            for (int64_t j = 0; j < cnt[i]; ++j) kp[start + j] = s != 0 || kept(boxes + 4 * j, crop, p);
            start += cnt[i];
        }
    }
    return py::make_tuple(crops, status, tried, keep);
}

// ------------------------------------------------------------------------------------------ box_encoder
// One sample's matching: each anchor's best IoU (forced to 2 for each box's best anchor) and box, as the torch
// reference computes them (the same float operations; ties go to the last anchor and the last box). m > 0.
// The anchors as columns (l, t, r, b, area), so that the loop over them vectorises.
struct AnchorCols {
    std::vector<float> l, t, r, b, area;
};

// no-trapping-math (no change to any value, only to what may raise floating-point exception flags, which nothing
// reads) lets GCC turn the selects of the IoU loop into vector code: 4 anchors at a time.
__attribute__((optimize("no-trapping-math"))) void match_one(const float* bx, int64_t m, const AnchorCols& an, int64_t a, float* __restrict row,
               float* __restrict best_iou, int32_t* __restrict best) {
    const float* __restrict al = an.l.data();
    const float* __restrict at = an.t.data();
    const float* __restrict ar = an.r.data();
    const float* __restrict ab = an.b.data();
    const float* __restrict area_a = an.area.data();
    for (int64_t j = 0; j < m; ++j) {
        const float b0 = bx[4 * j], b1 = bx[4 * j + 1], b2 = bx[4 * j + 2], b3 = bx[4 * j + 3];
        const float area_b = (b2 - b0) * (b3 - b1);
        // branch-free loops the compiler vectorises (the division is taken everywhere and kept where uni > 0:
        // the same values as dividing only there)
        for (int64_t k = 0; k < a; ++k) {
            const float l = al[k], t = at[k], r = ar[k], bt = ab[k];  // std::min(b2, r) - std::max(b0, l), ...
            float w = (r < b2 ? r : b2) - (b0 < l ? l : b0);
            float h = (bt < b3 ? bt : b3) - (b1 < t ? t : b1);
            w = w < 0 ? 0.0f : w;
            h = h < 0 ? 0.0f : h;
            const float inter = w * h;
            const float uni = area_b + area_a[k] - inter;
            const bool pos = uni > 0;
            const float v = inter / (pos ? uni : 1.0f);
            row[k] = pos ? v : 0.0f;
        }
        float top = -std::numeric_limits<float>::infinity();
        int64_t top_k = 0;
        for (int64_t k = 0; k < a; ++k) {
            if (row[k] >= top) top = row[k], top_k = k;
        }
        row[top_k] = 2.0f;  // every box keeps its best anchor
        if (j == 0) {
            std::copy(row, row + a, best_iou);
            std::fill(best, best + a, 0);
            continue;
        }
        const int32_t jj = static_cast<int32_t>(j);
        for (int64_t k = 0; k < a; ++k) {
            const bool take = row[k] >= best_iou[k];
            best_iou[k] = take ? row[k] : best_iou[k];
            best[k] = take ? jj : best[k];
        }
    }
}

// box_encoder of a batch (offset=False's output): boxes (total, 4) float32 ltrb of the samples back to back,
// `counts` per sample, labels (total,) of any type (copied as they are), anchors (A, 4) float32 ltrb. Returns
// (out (n, A, 4) float32: the matched box's [cx, cy, w, h], or the anchor's where unmatched; labels (n, A) of the
// labels' type: the matched box's, 0 where unmatched; matched (n, A) bool). Centres are (l + r) * 0.5 and sizes
// r - l in float32, as the torch reference (sluice.ops.detection.box_encoder.encode_boxes) computes them. The
// samples run on `pool`'s threads (None: this one), the GIL released.
py::tuple encode_boxes(py::array_t<float, py::array::c_style> boxes, py::array labels,
                       py::array_t<int64_t, py::array::c_style> counts, py::array_t<float, py::array::c_style> anchors,
                       double criteria, py::object pool) {
    const size_t n = static_cast<size_t>(counts.size());
    const int64_t a = anchors.size() / 4;
    const int64_t* cnt = counts.data();
    std::vector<int64_t> start(n + 1, 0);
    for (size_t i = 0; i < n; ++i) {
        if (cnt[i] < 0 || cnt[i] > std::numeric_limits<int32_t>::max())
            throw std::invalid_argument("encode_boxes: a count is out of range");
        start[i + 1] = start[i] + cnt[i];
    }
    if (boxes.size() != 4 * start[n] || anchors.size() != 4 * a)
        throw std::invalid_argument("encode_boxes: boxes and anchors must hold 4 values per row");
    if (labels.size() != start[n] || !(labels.flags() & py::array::c_style))
        throw std::invalid_argument("encode_boxes: labels must be a contiguous array of one label per box");
    const py::ssize_t na[3] = {static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(a), 4};
    py::array_t<float> out({na[0], na[1], na[2]});
    py::array out_labels(labels.dtype(), {na[0], na[1]});
    py::array_t<bool> matched({na[0], na[1]});
    float* o = out.mutable_data();
    uint8_t* lo = static_cast<uint8_t*>(out_labels.mutable_data());
    bool* mo = matched.mutable_data();
    const size_t isz = static_cast<size_t>(labels.itemsize());
    const uint8_t* li = static_cast<const uint8_t*>(labels.data());
    const float* bx = boxes.data();
    const float* an = anchors.data();
    const float crit = static_cast<float>(criteria);
    WorkerPool* workers = pool_of(pool);
    {
        py::gil_scoped_release release;
        const size_t as = static_cast<size_t>(a);
        AnchorCols cols{std::vector<float>(as), std::vector<float>(as), std::vector<float>(as), std::vector<float>(as),
                        std::vector<float>(as)};
        std::vector<float> anchor_cwh(4 * as);
        for (int64_t k = 0; k < a; ++k) {
            const float* q = an + 4 * k;
            cols.l[k] = q[0], cols.t[k] = q[1], cols.r[k] = q[2], cols.b[k] = q[3];
            cols.area[k] = (q[2] - q[0]) * (q[3] - q[1]);
            float* c = anchor_cwh.data() + 4 * k;
            c[0] = (q[0] + q[2]) * 0.5f, c[1] = (q[1] + q[3]) * 0.5f, c[2] = q[2] - q[0], c[3] = q[3] - q[1];
        }
        auto one = [&](size_t i) {
            const int64_t m = cnt[i];
            float* oi = o + i * 4 * a;
            uint8_t* li_out = lo + i * a * isz;
            bool* mi = mo + i * a;
            std::memset(li_out, 0, a * isz);
            if (m == 0) {
                std::memcpy(oi, anchor_cwh.data(), sizeof(float) * 4 * a);
                std::fill(mi, mi + a, false);
                return;
            }
            std::vector<float> row(static_cast<size_t>(a)), best_iou(static_cast<size_t>(a));
            std::vector<int32_t> best(static_cast<size_t>(a));
            const float* b0 = bx + 4 * start[i];
            match_one(b0, m, cols, a, row.data(), best_iou.data(), best.data());
            std::vector<float> box_cwh(static_cast<size_t>(4 * m));
            for (int64_t j = 0; j < m; ++j) {
                const float* b = b0 + 4 * j;
                float* c = box_cwh.data() + 4 * j;
                c[0] = (b[0] + b[2]) * 0.5f, c[1] = (b[1] + b[3]) * 0.5f, c[2] = b[2] - b[0], c[3] = b[3] - b[1];
            }
            const uint8_t* lab = li + start[i] * isz;
            for (int64_t k = 0; k < a; ++k) {
                const bool hit = best_iou[k] > crit;
                mi[k] = hit;
                if (hit) {
                    std::memcpy(oi + 4 * k, box_cwh.data() + 4 * best[k], sizeof(float) * 4);
                    std::memcpy(li_out + k * isz, lab + best[k] * isz, isz);
                } else {
                    std::memcpy(oi + 4 * k, anchor_cwh.data() + 4 * k, sizeof(float) * 4);
                }
            }
        };
        if (workers != nullptr) {
            workers->run(n, one);
        } else {
            for (size_t i = 0; i < n; ++i) one(i);
        }
    }
    return py::make_tuple(out, out_labels, matched);
}

}  // namespace

void register_detection(py::module_& m) {
    m.def("random_bbox_crops", &random_bbox_crops, "random_bbox_crop's windows of a batch (see sluice.native.bbox_crop).");
    m.def("encode_boxes", &encode_boxes, py::arg("boxes"), py::arg("labels"), py::arg("counts"), py::arg("anchors"),
          py::arg("criteria"), py::arg("pool") = py::none(),
          "box_encoder's matching and encoding of a batch (see sluice.native.detection.encode_boxes).");
}

}  // namespace sluice
