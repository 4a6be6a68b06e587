// Decoding (windows of) a batch of JPEGs with libjpeg, GIL released, several threads sharing one batch.
//
// libjpeg is opened at run time (dlopen) rather than linked: the core then builds where only jpeglib.h is
// installed, and runs with the copy of libjpeg-turbo that Pillow's wheel brings or the system's. The header
// compiled against fixes the ABI (jpeg_abi(): 62 where jconfig.h says so, 80 on systems with libjpeg-turbo8's
// headers); jpeg_CreateDecompress checks the version and the size of the decompression struct, so a library of
// another ABI is refused when it is opened, never used, and sluice.native.jpeg tries the builds of this ABI.
//
// The pixels are those of simplejpeg.decode_jpeg(fastdct=False, fastupsample=False, strict=True) cut to the
// window (sluice.native.jpeg's fallback is exactly that): ISLOW IDCT (IFAST with fast_idct), fancy upsampling, and
// every warning of libjpeg (corrupt data) is an error. A window saves work: the columns outside it, beyond a
// margin of one iMCU, are not transformed (jpeg_crop_scanline), the rows above it are skipped
// (jpeg_skip_scanlines) and decoding stops after its last row (tests/native/test_jpeg_native.py checks that the
// pixels stay identical).
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first

#include <jpeglib.h>

#include <dlfcn.h>
#include <setjmp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core.h"

namespace sluice {
namespace {

// Status of a sample (sluice.native.jpeg.OK / ERROR / NOT_HANDLED).
constexpr int kOk = 0;
constexpr int kError = 1;       // libjpeg failed: corrupt or truncated data, or a window outside the image
constexpr int kNotHandled = 2;  // a JPEG this path does not take (CMYK, 12-bit, arithmetic, lossless ...)

// Rows asked of jpeg_read_scanlines at once: with fewer than a row group (2 rows with 4:2:0), the fancy
// upsampler copies each row through a spare one.
constexpr JDIMENSION kRowsPerRead = 16;

// ---- the library, opened once ----------------------------------------------------------------------------
struct Lib {
    decltype(&jpeg_std_error) std_error = nullptr;
    decltype(&jpeg_CreateDecompress) create = nullptr;
    decltype(&jpeg_destroy_decompress) destroy = nullptr;
    decltype(&jpeg_mem_src) mem_src = nullptr;
    decltype(&jpeg_read_header) read_header = nullptr;
    decltype(&jpeg_start_decompress) start = nullptr;
    decltype(&jpeg_read_scanlines) read_scanlines = nullptr;
    decltype(&jpeg_skip_scanlines) skip_scanlines = nullptr;
    decltype(&jpeg_crop_scanline) crop_scanline = nullptr;
    decltype(&jpeg_finish_decompress) finish = nullptr;
    decltype(&jpeg_abort_decompress) abort = nullptr;
};

Lib g_lib;
std::atomic<bool> g_ready{false};
std::string g_path;  // the library opened, for messages

// ---- errors: libjpeg calls error_exit, which must not return; it jumps back to the sample's setjmp ----------
struct ErrorMgr {
    jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr cinfo) {
    auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

// A warning (level < 0) means corrupt data that libjpeg would paper over: an error here, as in simplejpeg's
// strict mode. Trace messages (level >= 0) are ignored.
void on_message(j_common_ptr cinfo, int level) {
    if (level < 0) on_error(cinfo);
}

void no_output(j_common_ptr) {}  // nothing on stderr

// ---- the frame header, read before libjpeg so that what it should not take is handed back -----------------
struct Frame {
    int marker = 0;  // SOFn marker byte, 0 when no frame header was found (libjpeg then names the damage)
    int precision = 0;
    int components = 0;
};

bool is_sof(int m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

Frame frame_of(const uint8_t* d, size_t n) {
    Frame f;
    if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return f;
    size_t pos = 2;
    while (pos + 4 <= n) {
        if (d[pos] != 0xFF) return f;
        int m = d[pos + 1];
        if (m == 0xFF) {  // fill byte
            pos += 1;
            continue;
        }
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {  // markers without a length
            pos += 2;
            continue;
        }
        if (m == 0xDA || m == 0xD9) return f;
        size_t len = (static_cast<size_t>(d[pos + 2]) << 8) | d[pos + 3];
        if (is_sof(m)) {
            if (pos + 10 > n) return f;
            f.marker = m;
            f.precision = d[pos + 4];
            f.components = d[pos + 9];
            return f;
        }
        pos += 2 + len;
    }
    return f;
}

// Why this path does not take a frame ("" when it does). Baseline, extended and progressive Huffman-coded 8-bit
// gray or 3-component frames are libjpeg's common ground; the rest goes back to the per-sample decoders.
const char* not_handled(const Frame& f) {
    if (f.marker == 0) return "";  // no frame header: libjpeg reports the damage
    if (f.marker != 0xC0 && f.marker != 0xC1 && f.marker != 0xC2)
        return "not a Huffman-coded DCT JPEG (arithmetic, lossless or hierarchical)";
    if (f.precision != 8) return "not an 8-bit JPEG";
    if (f.components != 1 && f.components != 3) return "not a gray or 3-component JPEG (CMYK/YCCK)";
    return "";
}

// ---- one sample ----------------------------------------------------------------------------------------------
struct Job {
    const uint8_t* data;
    size_t size;
    int64_t y, x, h, w;  // the window
    J_COLOR_SPACE space;
    int channels;
    bool fast_idct;
    uint8_t* out;  // h rows of w * channels bytes
};

// Copies the window's part of the rows libjpeg just wrote.
void copy_rows(JSAMPARRAY rows, int count, int64_t col, const Job& job, int64_t* row) {
    const size_t bytes = static_cast<size_t>(job.w * job.channels);
    for (int r = 0; r < count; ++r, ++*row)
        std::memcpy(job.out + *row * job.w * job.channels, rows[r] + col * job.channels, bytes);
}

// Decodes one sample with cinfo (created, idle); returns its status, the reason in err->message. Only plain
// data lives in this frame: longjmp skips destructors.
int decode_one(jpeg_decompress_struct* cinfo, ErrorMgr* err, const Job& job) {
    if (setjmp(err->jump)) {
        g_lib.abort(cinfo);  // back to idle, ready for the next sample
        return kError;
    }
    g_lib.mem_src(cinfo, job.data, static_cast<unsigned long>(job.size));
    g_lib.read_header(cinfo, TRUE);
    if (job.y < 0 || job.x < 0 || job.h < 1 || job.w < 1 || job.y + job.h > cinfo->image_height ||
        job.x + job.w > cinfo->image_width) {
        std::snprintf(err->message, sizeof err->message,
                      "crop window (y=%lld, x=%lld, h=%lld, w=%lld) lies outside the %u x %u image",
                      static_cast<long long>(job.y), static_cast<long long>(job.x), static_cast<long long>(job.h),
                      static_cast<long long>(job.w), cinfo->image_height, cinfo->image_width);
        g_lib.abort(cinfo);
        return kError;
    }
    cinfo->out_color_space = job.space;
    cinfo->dct_method = job.fast_idct ? JDCT_IFAST : JDCT_ISLOW;
    cinfo->do_fancy_upsampling = TRUE;
    g_lib.start(cinfo);

    // Columns: keep one iMCU beyond the window on each side, so that the chroma samples the fancy upsampler
    // reads next to the window are the image's, not the cropped region's replicated edge.
    JDIMENSION first = 0;
    if (job.w < cinfo->output_width) {
        const int64_t imcu = static_cast<int64_t>(cinfo->max_h_samp_factor) * DCTSIZE;
        const int64_t lo = job.x > imcu ? job.x - imcu : 0;
        const int64_t hi = job.x + job.w + imcu < cinfo->output_width ? job.x + job.w + imcu : cinfo->output_width;
        JDIMENSION width = static_cast<JDIMENSION>(hi - lo);
        first = static_cast<JDIMENSION>(lo);
        g_lib.crop_scanline(cinfo, &first, &width);  // moves `first` down to an iMCU boundary
    }
    const int64_t col = job.x - first;
    if (job.y > 0) g_lib.skip_scanlines(cinfo, static_cast<JDIMENSION>(job.y));

    JSAMPARRAY rows = (*cinfo->mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(cinfo), JPOOL_IMAGE,
                                                  cinfo->output_width * cinfo->output_components, kRowsPerRead);
    // A window as wide as the decoded rows is read straight into the output, else through `rows`.
    const bool direct = col == 0 && static_cast<int64_t>(cinfo->output_width) == job.w;
    const size_t row_bytes = static_cast<size_t>(job.w * job.channels);
    JSAMPROW into[kRowsPerRead];
    int64_t row = 0;
    while (row < job.h) {
        const JDIMENSION want = static_cast<JDIMENSION>(std::min<int64_t>(job.h - row, kRowsPerRead));
        JDIMENSION got = 0;
        if (direct) {
            for (JDIMENSION r = 0; r < want; ++r) into[r] = job.out + (row + r) * row_bytes;
            row += got = g_lib.read_scanlines(cinfo, into, want);
        } else {
            copy_rows(rows, static_cast<int>(got = g_lib.read_scanlines(cinfo, rows, want)), col, job, &row);
        }
        if (got == 0) {  // cannot happen with an in-memory source (it never suspends); never loop on it
            std::snprintf(err->message, sizeof err->message, "libjpeg returned no rows at row %lld",
                          static_cast<long long>(job.y + row));
            g_lib.abort(cinfo);
            return kError;
        }
    }
    // Stopping early skips the rest of the entropy-coded data; where the stream does not end with an EOI marker
    // it may be truncated, and simplejpeg would say so: read on to the end to say the same.
    const bool ends_with_eoi = job.size >= 2 && job.data[job.size - 2] == 0xFF && job.data[job.size - 1] == 0xD9;
    if (cinfo->output_scanline < cinfo->output_height && ends_with_eoi) {
        g_lib.abort(cinfo);
        return kOk;
    }
    while (cinfo->output_scanline < cinfo->output_height)  // decoded, not skipped: skipping to the end reads nothing
        g_lib.read_scanlines(cinfo, rows, kRowsPerRead);
    g_lib.finish(cinfo);
    return kOk;
}

// A decompressor for the samples one call takes in turn (libjpeg objects are per thread, reusable).
struct Decompressor {
    jpeg_decompress_struct cinfo;
    ErrorMgr err;
    bool made = false;

    // Returns "" or why libjpeg could not be set up (a library of another ABI: version or struct size).
    std::string make() {
        cinfo.err = g_lib.std_error(&err.pub);
        err.pub.error_exit = on_error;
        err.pub.emit_message = on_message;
        err.pub.output_message = no_output;
        return create(&cinfo, &err) ? std::string() : std::string(err.message);
    }

    static bool create(jpeg_decompress_struct* cinfo, ErrorMgr* err) {
        if (setjmp(err->jump)) return false;  // jpeg_CreateDecompress sets cinfo->mem = NULL before checking
        g_lib.create(cinfo, JPEG_LIB_VERSION, sizeof(jpeg_decompress_struct));
        return true;
    }

    ~Decompressor() {
        if (made) g_lib.destroy(&cinfo);
    }
};

template <typename T>
bool load(void* handle, const char* name, T* fn) {
    *fn = reinterpret_cast<T>(dlsym(handle, name));
    return *fn != nullptr;
}

// Opens the libjpeg at `path` unless one is open already (the first that works stays for the process; called
// with the GIL held, so never twice at once). Returns "" when it is usable, else the reason.
std::string jpeg_open(const std::string& path) {
    if (g_ready.load()) return "";
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = dlerror();
        return std::string("cannot open ") + path + ": " + (why ? why : "unknown error");
    }
    Lib lib;
    bool ok = load(handle, "jpeg_std_error", &lib.std_error) && load(handle, "jpeg_CreateDecompress", &lib.create) &&
              load(handle, "jpeg_destroy_decompress", &lib.destroy) && load(handle, "jpeg_mem_src", &lib.mem_src) &&
              load(handle, "jpeg_read_header", &lib.read_header) &&
              load(handle, "jpeg_start_decompress", &lib.start) &&
              load(handle, "jpeg_read_scanlines", &lib.read_scanlines) &&
              load(handle, "jpeg_skip_scanlines", &lib.skip_scanlines) &&
              load(handle, "jpeg_crop_scanline", &lib.crop_scanline) &&
              load(handle, "jpeg_finish_decompress", &lib.finish) &&
              load(handle, "jpeg_abort_decompress", &lib.abort);
    if (!ok) {
        dlclose(handle);
        return path + " lacks libjpeg-turbo's functions (jpeg_skip_scanlines, jpeg_crop_scanline ...)";
    }
    g_lib = lib;
    Decompressor probe;
    std::string why = probe.make();
    probe.made = why.empty();
    if (!why.empty()) {
        g_lib = Lib();
        dlclose(handle);
        return path + ": " + why;
    }
    g_path = path;
    g_ready.store(true);
    return "";
}

J_COLOR_SPACE space_of(const std::string& colorspace, int* channels) {
    *channels = colorspace == "GRAY" ? 1 : 3;
    if (colorspace == "RGB") return JCS_EXT_RGB;
    if (colorspace == "BGR") return JCS_EXT_BGR;
    if (colorspace == "GRAY") return JCS_GRAYSCALE;
    throw std::invalid_argument("jpeg_decode: Invalid colorspace ('" + colorspace +
                                "'). Supported values are 'RGB', 'BGR', 'GRAY'.");
}

// Decodes samples i of `data` (taken in turn from `counter` when given, shared by the calls of other threads;
// else all of them) into out[out_offsets[i]:], status[i] set for each. Returns (i, reason) for each sample it
// took whose status is not OK.
py::list jpeg_decode(const py::sequence& data, py::array_t<int64_t, py::array::c_style> windows,
                     const std::string& colorspace, bool fast_idct, py::buffer out_buf,
                     py::array_t<int64_t, py::array::c_style> out_offsets,
                     py::array_t<int32_t, py::array::c_style> status_arr, py::object counter_obj) {
    if (!g_ready.load()) throw std::runtime_error("jpeg_decode: libjpeg is not open (call jpeg_open first)");
    const size_t n = py::len(data);
    if (windows.ndim() != 2 || static_cast<size_t>(windows.shape(0)) != n || windows.shape(1) != 4 ||
        static_cast<size_t>(out_offsets.size()) != n || static_cast<size_t>(status_arr.size()) != n)
        throw std::invalid_argument("jpeg_decode: windows (n, 4), out_offsets (n) and status (n) need one row per "
                                    "sample");
    int channels = 3;
    const J_COLOR_SPACE space = space_of(colorspace, &channels);
    Bytes out = bytes_of(out_buf, true);
    const int64_t* win = windows.data();
    const int64_t* off = out_offsets.data();
    std::vector<py::buffer_info> views;
    views.reserve(n);
    for (auto item : data) {
        views.push_back(py::reinterpret_borrow<py::buffer>(item).request());
        const py::buffer_info& b = views.back();
        if (b.ndim > 1 || (b.ndim == 1 && b.strides[0] != b.itemsize))
            throw std::invalid_argument("jpeg_decode: each sample's bytes must be one contiguous 1-D buffer");
    }
    std::vector<Job> jobs(n);
    for (size_t i = 0; i < n; ++i) {
        const int64_t* v = win + 4 * i;
        const int64_t need = v[2] * v[3] * channels;
        if (v[2] < 1 || v[3] < 1 || off[i] < 0 || static_cast<uint64_t>(off[i] + need) > out.size)
            throw std::invalid_argument("jpeg_decode: a sample's window is empty or its output lies outside `out`");
        jobs[i] = Job{static_cast<const uint8_t*>(views[i].ptr), static_cast<size_t>(views[i].size * views[i].itemsize),
                      v[0], v[1], v[2], v[3], space, channels, fast_idct, out.data + off[i]};
    }
    int32_t* status = status_arr.mutable_data();
    int64_t* counter = nullptr;
    if (!counter_obj.is_none()) {
        auto c = counter_obj.cast<py::array_t<int64_t, py::array::c_style>>();
        if (c.size() != 1 || !c.writeable()) throw std::invalid_argument("jpeg_decode: counter is one int64");
        counter = c.mutable_data();
    }
    std::vector<std::pair<size_t, std::string>> failed;
    {
        py::gil_scoped_release release;
        Decompressor dec;
        std::string why = dec.make();
        dec.made = why.empty();
        size_t next = 0;
        for (;;) {
            size_t i = counter ? static_cast<size_t>(__atomic_fetch_add(counter, 1, __ATOMIC_RELAXED)) : next++;
            if (i >= n) break;
            const Frame frame = frame_of(jobs[i].data, jobs[i].size);
            const char* skip = not_handled(frame);
            if (!dec.made) {
                status[i] = kError;
                failed.emplace_back(i, why);
            } else if (*skip) {
                status[i] = kNotHandled;
                failed.emplace_back(i, skip);
            } else {
                status[i] = decode_one(&dec.cinfo, &dec.err, jobs[i]);
                if (status[i] != kOk) failed.emplace_back(i, dec.err.message);
            }
        }
    }
    py::list result;
    for (auto& f : failed) result.append(py::make_tuple(f.first, f.second));
    return result;
}

}  // namespace

void register_jpeg(py::module_& m) {
    m.def("jpeg_open", &jpeg_open, py::arg("path"),
          "Open the libjpeg (libjpeg-turbo, of the ABI jpeg_abi() names) at path, once per process: '' when usable, else why not.");
    m.def("jpeg_library", [] { return g_path; }, "The path of the libjpeg opened ('' when none).");
    // The ABI of the jpeglib.h this core was compiled against (62, 70 or 80): the structs it hands libjpeg have
    // that version's layout, so only a library of the same ABI opens (jpeg_CreateDecompress checks).
    m.def("jpeg_abi", [] { return JPEG_LIB_VERSION; }, "JPEG_LIB_VERSION of the jpeglib.h the core was built with.");
    m.def("jpeg_decode", &jpeg_decode, py::arg("data"), py::arg("windows"), py::arg("colorspace"),
          py::arg("fast_idct"), py::arg("out"), py::arg("out_offsets"), py::arg("status"),
          py::arg("counter") = py::none(),
          "Decode windows (y, x, h, w) of JPEGs into out at out_offsets as HWC rows; status per sample "
          "(0 ok, 1 error, 2 not handled); returns [(i, reason)] for the samples that are not ok.");
}

}  // namespace sluice
