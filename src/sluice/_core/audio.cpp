// Audio files of a batch, decoded with the GIL released: plain PCM / IEEE-float WAVs are parsed and converted
// here with libsndfile's arithmetic, FLACs decoded by sluice's own decoder (flac.cpp) and converted likewise; every
// other file (Ogg, MP3, AIFF, odd WAVs, and the FLACs flac.cpp refuses) is decoded by libsndfile itself, opened at run time from soundfile's wheel (the library soundfile uses, so the results are the same) and
// fed from memory through C callbacks, never through Python.
//
// The call sequence on libsndfile is soundfile's (SoundFile(..., mode="r") then seek / read as
// sluice.backends.audio.read_into does): the same clipping setting, the same seeks and read sizes (mpg123's output
// depends on them), the same checks. sluice.native.audio wraps this; its pure-Python twin is that soundfile code.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core.h"
#include "flac.h"

// Samples are read from the file bytes (and from libsndfile's buffers) as little-endian values in place.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "sluice's audio core assumes a little-endian host");

namespace sluice {
namespace {

// ------------------------------------------------------------------------------ libsndfile, opened at run time
using sf_count_t = int64_t;
struct SF_INFO {
    sf_count_t frames;
    int samplerate, channels, format, sections, seekable;
};
struct SF_VIRTUAL_IO {
    sf_count_t (*get_filelen)(void*);
    sf_count_t (*seek)(sf_count_t, int, void*);
    sf_count_t (*read)(void*, sf_count_t, void*);
    sf_count_t (*write)(const void*, sf_count_t, void*);
    sf_count_t (*tell)(void*);
};
struct SNDFILE;

constexpr int kRead = 0x10, kGetLogInfo = 0x1001, kSetClipping = 0x10C0, kTrue = 1;
constexpr int kTypeMask = 0x0FFF0000, kSubMask = 0xFFFF;
constexpr int kWav = 0x010000, kW64 = 0x0B0000, kWavex = 0x130000, kOgg = 0x200000, kRf64 = 0x220000,
              kMpeg = 0x230000;
constexpr int kSubFloat = 0x0006, kSubDouble = 0x0007;

struct Sndfile {
    SNDFILE* (*open_virtual)(SF_VIRTUAL_IO*, int, SF_INFO*, void*) = nullptr;
    int (*close)(SNDFILE*) = nullptr;
    sf_count_t (*seek)(SNDFILE*, sf_count_t, int) = nullptr;
    sf_count_t (*readf_short)(SNDFILE*, int16_t*, sf_count_t) = nullptr;
    sf_count_t (*readf_int)(SNDFILE*, int32_t*, sf_count_t) = nullptr;
    sf_count_t (*readf_float)(SNDFILE*, float*, sf_count_t) = nullptr;
    sf_count_t (*readf_double)(SNDFILE*, double*, sf_count_t) = nullptr;
    int (*error)(SNDFILE*) = nullptr;
    const char* (*error_number)(int) = nullptr;
    int (*command)(SNDFILE*, int, void*, int) = nullptr;
};
Sndfile g_sf;
bool g_sf_loaded = false;
// libsndfile keeps the error of a failed open in one global that every open resets: opens are serialised so that
// each reads its own (soundfile serialises its opens the same way).
std::mutex g_open_mutex;

template <class F>
bool resolve(void* lib, const char* name, F& fn) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    return fn != nullptr;
}

// Opens libsndfile at `path` (soundfile's own copy); returns "" or why it could not.
std::string load_sndfile(const std::string& path) {
    std::lock_guard<std::mutex> lock(g_open_mutex);
    if (g_sf_loaded) return "";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) return std::string("dlopen failed: ") + dlerror();
    Sndfile s;
    bool ok = resolve(lib, "sf_open_virtual", s.open_virtual) && resolve(lib, "sf_close", s.close) &&
              resolve(lib, "sf_seek", s.seek) && resolve(lib, "sf_readf_short", s.readf_short) &&
              resolve(lib, "sf_readf_int", s.readf_int) && resolve(lib, "sf_readf_float", s.readf_float) &&
              resolve(lib, "sf_readf_double", s.readf_double) && resolve(lib, "sf_error", s.error) &&
              resolve(lib, "sf_error_number", s.error_number) && resolve(lib, "sf_command", s.command);
    if (!ok) return "a libsndfile function is missing from " + path;
    g_sf = s;
    g_sf_loaded = true;
    return "";
}

// soundfile's LibsndfileError.error_string.
std::string error_string(int code) {
    if (code == 0) return "(Garbled error message from libsndfile)";
    return g_sf.error_number(code);
}

// The encoded bytes of one file and a read position: libsndfile's virtual file, with the semantics of
// sluice.backends.audio._MemoryFile (seeks clamp at 0, not at the end; reads past the end return nothing).
struct Memory {
    const uint8_t* data = nullptr;
    int64_t size = 0;
    int64_t pos = 0;
};
sf_count_t vio_length(void* m) { return static_cast<Memory*>(m)->size; }
sf_count_t vio_tell(void* m) { return static_cast<Memory*>(m)->pos; }
sf_count_t vio_seek(sf_count_t offset, int whence, void* p) {
    Memory* m = static_cast<Memory*>(p);
    int64_t base = whence == SEEK_CUR ? m->pos : whence == SEEK_END ? m->size : 0;
    m->pos = std::max<int64_t>(0, base + offset);
    return m->pos;
}
sf_count_t vio_read(void* dst, sf_count_t count, void* p) {
    Memory* m = static_cast<Memory*>(p);
    int64_t n = std::max<int64_t>(0, std::min(m->size, m->pos + count) - m->pos);
    if (n > 0) std::memcpy(dst, m->data + m->pos, static_cast<size_t>(n));
    m->pos += n;
    return n;
}
sf_count_t vio_write(const void*, sf_count_t, void*) { return 0; }
SF_VIRTUAL_IO g_vio = {vio_length, vio_seek, vio_read, vio_write, vio_tell};

// ------------------------------------------------------------------------------------------ what went wrong
// Python words each problem (sluice.backends.audio.describe); the names are exported as AUDIO_PROBLEMS.
enum Problem : int32_t {
    kOk = 0,
    kEmpty,         // zero bytes
    kUnsupported,   // libsndfile cannot open it (text: its error)
    kLibsndfile,    // libsndfile failed while seeking or reading (text: its error)
    kWavTruncated,  // a: bytes the data chunk announces, b: bytes present
    kOggTruncated,  // no end-of-stream page
    kShort,         // a: frames the header announces, b: frames decoded
    kRate,          // a: the sample rate
    kNotFinite,     // a: the frame holding the first NaN, infinity or absurd value
    kOggCut,        // a: byte where the last page starts, b: the file's size (it ends inside that page)
    kOggDamaged,    // a: byte where a page with a wrong checksum (or no capture pattern) starts
    kNotParsed,     // headers only: not a plain WAV (libsndfile must judge it); not an error
};
const char* const kProblemNames[] = {"ok",         "empty", "unsupported", "libsndfile", "wav_truncated",
                                     "ogg_truncated", "short", "rate", "not_finite", "ogg_cut",
                                     "ogg_damaged", "not_parsed"};

constexpr int64_t kMinRate = 1, kMaxRate = 1000000;  // outside this a header is corrupt
constexpr double kFiniteLimit = 1e6;                // float samples beyond this magnitude are corrupt (issue 20)
constexpr int64_t kMaxChannels = 1024;             // libsndfile's limit; more goes to libsndfile to refuse

// ----------------------------------------------------------------------------------------- WAV headers
enum Format : int8_t { kNone = -1, kU8, kS16, kS24, kS32, kF32, kF64 };
constexpr int kWidth[] = {1, 2, 3, 4, 4, 8};

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

Format wav_format(uint32_t code, uint32_t bits) {
    if (code == 1) return bits == 8 ? kU8 : bits == 16 ? kS16 : bits == 24 ? kS24 : bits == 32 ? kS32 : kNone;
    if (code == 3) return bits == 32 ? kF32 : bits == 64 ? kF64 : kNone;
    return kNone;
}

struct Header {
    int64_t rate = 0, channels = 0, frames = 0;
    Format format = kNone;      // plain WAV: the sample format of the payload
    int64_t offset = 0, align = 0;  // plain WAV: byte offset of frame 0, bytes per frame
};

// sluice.backends.audio.parse_wav, rule for rule: a well-formed PCM / IEEE-float WAV (also
// WAVE_FORMAT_EXTENSIBLE) whose samples can be taken as they lie; false for anything libsndfile should judge.
bool parse_wav(const uint8_t* b, int64_t size, Header& h) {
    static const uint8_t kGuidTail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                          0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71};
    if (size < 44 || std::memcmp(b, "RIFF", 4) != 0 || std::memcmp(b + 8, "WAVE", 4) != 0) return false;
    bool have_fmt = false;
    Format format = kNone;
    uint32_t channels = 0, rate = 0, align = 0;
    int64_t pos = 12;
    while (pos + 8 <= size) {
        const uint32_t clen = le32(b + pos + 4);
        const int64_t body = pos + 8;
        if (std::memcmp(b + pos, "fmt ", 4) == 0) {
            if (clen < 16 || body + clen > size) return false;
            uint32_t code = le16(b + body), bits = le16(b + body + 14);
            channels = le16(b + body + 2);
            rate = le32(b + body + 4);
            align = le16(b + body + 12);
            if (code == 0xFFFE) {
                if (clen < 40) return false;
                uint32_t valid = le16(b + body + 18);
                const uint8_t* guid = b + body + 24;
                if (std::memcmp(guid + 2, kGuidTail, 14) != 0 || (valid != 0 && valid != bits)) return false;
                code = le16(guid);
            }
            have_fmt = true;
            format = wav_format(code, bits);
        } else if (std::memcmp(b + pos, "data", 4) == 0) {
            if (!have_fmt || format == kNone) return false;
            if (channels < 1 || channels > kMaxChannels || rate < kMinRate || rate > kMaxRate ||
                align != channels * kWidth[format] || !(clen > 0 && clen <= size - body))
                return false;
            h.rate = rate;
            h.channels = channels;
            h.frames = clen / align;
            h.format = format;
            h.offset = body;
            h.align = align;
            return true;
        }
        pos = body + clen + (clen & 1);  // chunks are padded to an even size
    }
    return false;
}

// ------------------------------------------------------------------------------- sample conversion
// libsndfile's conversions (sf_readf_short / _int / _float, normalisation on, clipping on as soundfile sets it),
// from each sample format; see the table in sluice/kernels/audio/pcm.py.
int32_t round_to_int(double x) {  // libsndfile's psf_lrint: NaN gives INT_MIN on x86
#if defined(__SSE2__)
    return _mm_cvtsd_si32(_mm_set_sd(x));
#else
    return static_cast<int32_t>(std::lrint(x));
#endif
}

template <class T>
T from_float(double x) {  // float and double samples (libsndfile scales them by 1 for integer reads)
    if constexpr (std::is_same_v<T, float>) {
        return static_cast<float>(x);
    } else if constexpr (std::is_same_v<T, int16_t>) {
        return x > 32767.0 ? 32767 : x < -32768.0 ? -32768 : static_cast<int16_t>(round_to_int(x));
    } else {
        return x > 2147483647.0 ? std::numeric_limits<int32_t>::max()
               : x < -2147483647.0 ? std::numeric_limits<int32_t>::min()
                                   : round_to_int(x);
    }
}

// An integer sample of `bits` bits, left-justified in 32 bits (u8 made signed), as libsndfile holds it.
template <class T>
T from_int32(int32_t v) {
    if constexpr (std::is_same_v<T, float>) return static_cast<float>(v) * (1.0f / 2147483648.0f);
    else if constexpr (std::is_same_v<T, int16_t>) return static_cast<int16_t>(v >> 16);
    else return v;
}

template <class V>
V load(const uint8_t* p) {  // a little-endian value at any alignment
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
}

template <Format F>
struct Sample;  // as<T>(p): the sample at p converted; float formats also load(p): its value
template <>
struct Sample<kU8> {
    template <class T>
    static T as(const uint8_t* p) {
        int32_t v = static_cast<int32_t>(p[0]) - 128;
        if constexpr (std::is_same_v<T, float>) return static_cast<float>(v) * (1.0f / 128.0f);
        else return from_int32<T>(v * (1 << 24));
    }
};
template <>
struct Sample<kS16> {
    template <class T>
    static T as(const uint8_t* p) {
        const int16_t v = load<int16_t>(p);
        if constexpr (std::is_same_v<T, float>) return static_cast<float>(v) * (1.0f / 32768.0f);
        else if constexpr (std::is_same_v<T, int16_t>) return v;
        else return static_cast<int32_t>(v) * 65536;
    }
};
template <>
struct Sample<kS24> {
    template <class T>
    static T as(const uint8_t* p) {
        uint32_t u = (static_cast<uint32_t>(p[0]) << 8) | (static_cast<uint32_t>(p[1]) << 16) |
                     (static_cast<uint32_t>(p[2]) << 24);
        return from_int32<T>(static_cast<int32_t>(u));
    }
};
template <>
struct Sample<kS32> {
    template <class T>
    static T as(const uint8_t* p) { return from_int32<T>(load<int32_t>(p)); }
};
template <>
struct Sample<kF32> {
    static double load(const uint8_t* p) { return sluice::load<float>(p); }
    template <class T>
    static T as(const uint8_t* p) {  // float to float keeps the bits (libsndfile copies them)
        if constexpr (std::is_same_v<T, float>) return sluice::load<float>(p);
        else return from_float<T>(load(p));
    }
};
template <>
struct Sample<kF64> {
    static double load(const uint8_t* p) { return sluice::load<double>(p); }
    template <class T>
    static T as(const uint8_t* p) { return from_float<T>(load(p)); }
};

// NumPy's pairwise summation (pairwise_sum_DOUBLE), so that a downmix equals read_into's
// frames.astype(np.float64).mean(axis=1) to the bit.
double pairwise_sum(const double* a, int64_t n) {
    if (n < 8) {
        double r = -0.0;
        for (int64_t i = 0; i < n; ++i) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; ++j) r[j] = a[j];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; ++j) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    int64_t half = n / 2;
    half -= half % 8;
    return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

template <class T>
T from_mean(double mean) {  // _downmix: float types take the mean, integer types np.rint of it
    if constexpr (std::is_same_v<T, float>) return static_cast<float>(mean);
    else return static_cast<T>(std::nearbyint(mean));
}

template <class T>
T mean_of(const double* row, int64_t channels) {  // one downmixed sample from a frame's converted samples
    return from_mean<T>((0.0 + pairwise_sum(row, channels)) / static_cast<double>(channels));
}

// The first frame (from 0) of `frames` holding a NaN, an infinity or a value beyond kFiniteLimit, or -1. One
// branch-free pass that vectorises; the frame is looked for only when there is one.
template <Format F>
int64_t first_bad_frame(const uint8_t* src, int64_t frames, int64_t channels) {
    const int64_t n = frames * channels;
    bool bad = false;
    for (int64_t i = 0; i < n; ++i) bad |= !(std::fabs(Sample<F>::load(src + i * kWidth[F])) <= kFiniteLimit);
    if (!bad) return -1;
    for (int64_t i = 0; i < n; ++i)
        if (!(std::fabs(Sample<F>::load(src + i * kWidth[F])) <= kFiniteLimit)) return i / channels;
    return -1;
}

template <Format F, class T>
void convert_frames(const uint8_t* src, int64_t frames, int64_t channels, bool downmix, T* out) {
    constexpr int w = kWidth[F];
    if (!downmix || channels == 1) {
        const int64_t n = frames * channels;
        for (int64_t i = 0; i < n; ++i) out[i] = Sample<F>::template as<T>(src + i * w);
        return;
    }
    std::vector<double> row(static_cast<size_t>(channels));
    for (int64_t f = 0; f < frames; ++f) {
        const uint8_t* p = src + f * channels * w;
        for (int64_t c = 0; c < channels; ++c) row[c] = static_cast<double>(Sample<F>::template as<T>(p + c * w));
        out[f] = mean_of<T>(row.data(), channels);
    }
}

template <class T>
void convert_any(Format format, const uint8_t* src, int64_t frames, int64_t channels, bool downmix, T* out) {
    switch (format) {
        case kU8: convert_frames<kU8>(src, frames, channels, downmix, out); break;
        case kS16: convert_frames<kS16>(src, frames, channels, downmix, out); break;
        case kS24: convert_frames<kS24>(src, frames, channels, downmix, out); break;
        case kS32: convert_frames<kS32>(src, frames, channels, downmix, out); break;
        case kF32: convert_frames<kF32>(src, frames, channels, downmix, out); break;
        case kF64: convert_frames<kF64>(src, frames, channels, downmix, out); break;
        default: break;
    }
}

// Copies `n` bytes to `dst` with streaming stores, which write whole cache lines to memory without first reading
// them in (as an ordinary store to memory not in the cache does) and without evicting what the cache holds.
void stream_copy(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__SSE2__)
    const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
    std::memcpy(dst, src, head);
    size_t i = head;
    for (; i + 16 <= n; i += 16)
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    std::memcpy(dst + i, src + i, n - i);
#else
    std::memcpy(dst, src, n);
#endif
}

// Outputs of this many bytes or more (a batch's whole buffer) are written with streaming stores: they cannot stay
// in the cache for the next operator anyway, and an ordinary store would first read every line it writes. 64 WAVs
// of 10 s (113 MB of float32) decoded in 5.05 instead of 5.75 ms on 2 cores (benchmarks/RESULTS.md, issue 19).
constexpr size_t kStreamFrom = size_t(32) << 20;

// Converts `frames` frames of `channels` interleaved samples of `format` at `src` into `out` (averaging the
// channels with `downmix`); with `stream`, chunk by chunk into a buffer that stays in the cache, each chunk then
// streamed to `out` (the same values). With `check` (float formats only) nothing is written when a sample is not
// finite or absurdly large: returns that frame, else -1.
template <class T>
int64_t convert(Format format, const uint8_t* src, int64_t frames, int64_t channels, bool downmix, bool check,
                T* out, bool stream = false) {
    if (check && format == kF32) {
        int64_t bad = first_bad_frame<kF32>(src, frames, channels);
        if (bad >= 0) return bad;
    } else if (check && format == kF64) {
        int64_t bad = first_bad_frame<kF64>(src, frames, channels);
        if (bad >= 0) return bad;
    }
    if (!stream) {
        convert_any(format, src, frames, channels, downmix, out);
        return -1;
    }
    constexpr size_t kChunk = 4 << 10;  // bytes of output per chunk: 4 KiB ran fastest here, 16 KiB 1.4x slower
    static_assert(kMaxChannels * sizeof(T) <= kChunk, "a chunk holds at least one frame");
    alignas(64) uint8_t chunk[kChunk];
    const int64_t width = downmix ? 1 : channels;
    const int64_t per = static_cast<int64_t>(kChunk / (static_cast<size_t>(width) * sizeof(T)));
    const int64_t step = channels * kWidth[format];
    for (int64_t f = 0; f < frames; f += per) {
        const int64_t n = std::min(per, frames - f);
        convert_any(format, src + f * step, n, channels, downmix, reinterpret_cast<T*>(chunk));
        stream_copy(reinterpret_cast<uint8_t*>(out + f * width), chunk, static_cast<size_t>(n * width) * sizeof(T));
    }
#if defined(__SSE2__)
    _mm_sfence();  // the streamed stores are seen by other threads before this call returns
#endif
    return -1;
}

// ------------------------------------------------------------------------------------------ one file
struct Failure {
    Problem problem = kOk;
    int64_t a = 0, b = 0;
    std::string text;
};

struct File {
    Memory mem;
    Header header;
    Failure failure;
    SNDFILE* sf = nullptr;  // set when libsndfile decodes this file
    bool flac = false;      // set when flac.cpp decodes this file
    flac::StreamInfo stream;
    int major = 0;          // libsndfile's container (SF_FORMAT_TYPEMASK)
    bool float_source = false;

    bool failed() const { return failure.problem != kOk && failure.problem != kNotParsed; }
    void fail(Problem p, int64_t a = 0, int64_t b = 0, std::string text = "") {
        failure = Failure{p, a, b, std::move(text)};
        close();
    }
    void close() {
        if (sf) g_sf.close(sf);
        sf = nullptr;
    }
};

// _check_wav_length: libsndfile logs "data : <announced> (should be <present>)" for a cut data chunk. Returns
// true with the two numbers at the first place the log says so (the regex data\s*:\s*(\d+)\s*\(should be (\d+)\)).
bool cut_data_chunk(const std::string& log, uint64_t& declared, uint64_t& actual) {
    auto digits = [&](size_t& i, uint64_t& v) {
        size_t start = i;
        v = 0;
        while (i < log.size() && std::isdigit(static_cast<unsigned char>(log[i]))) {
            v = v > (std::numeric_limits<uint64_t>::max() - 9) / 10 ? std::numeric_limits<uint64_t>::max()
                                                                   : v * 10 + (log[i] - '0');
            ++i;
        }
        return i > start;
    };
    auto spaces = [&](size_t& i) {
        while (i < log.size() && std::isspace(static_cast<unsigned char>(log[i]))) ++i;
    };
    static const std::string kShould = "(should be ";
    for (size_t at = log.find("data"); at != std::string::npos; at = log.find("data", at + 1)) {
        size_t i = at + 4;
        spaces(i);
        if (i >= log.size() || log[i] != ':') continue;
        ++i;
        spaces(i);
        if (!digits(i, declared)) continue;
        spaces(i);
        if (log.compare(i, kShould.size(), kShould) != 0) continue;
        i += kShould.size();
        if (!digits(i, actual) || i >= log.size() || log[i] != ')') continue;
        return true;
    }
    return false;
}

// Ogg's page checksum: CRC-32, polynomial 0x04C11DB7 fed most significant bit first, initial 0, no final xor.
struct OggCrc {
    uint32_t table[256];
    OggCrc() {
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t r = i << 24;
            for (int k = 0; k < 8; ++k) r = (r & 0x80000000u) ? (r << 1) ^ 0x04C11DB7u : r << 1;
            table[i] = r;
        }
    }
    uint32_t update(uint32_t crc, const uint8_t* p, int64_t n) const {
        for (int64_t i = 0; i < n; ++i) crc = (crc << 8) ^ table[((crc >> 24) ^ p[i]) & 0xFF];
        return crc;
    }
};

// _check_ogg_pages: every page from the first byte to the last is whole (the file does not end inside one), starts
// with "OggS" and carries its checksum (libvorbisfile skips a damaged page silently, and a cut last page leaves
// libsndfile with no length: fewer frames, or none, without an error); the last page is flagged end-of-stream.
Failure ogg_pages(const Memory& m) {
    static const OggCrc crc;
    static const uint8_t zeros[4] = {0, 0, 0, 0};
    int64_t pos = 0;
    uint8_t flags = 0;
    while (pos < m.size) {
        const uint8_t* page = m.data + pos;
        const int64_t left = m.size - pos;
        if (left >= 4 && std::memcmp(page, "OggS", 4) != 0) return Failure{kOggDamaged, pos, 0, ""};
        if (left < 27 || left < 27 + page[26]) return Failure{kOggCut, pos, m.size, ""};
        const int nseg = page[26];
        int64_t body = 0;
        for (int k = 0; k < nseg; ++k) body += page[27 + k];
        const int64_t size = 27 + nseg + body;
        if (size > left) return Failure{kOggCut, pos, m.size, ""};
        uint32_t c = crc.update(0, page, 22);
        c = crc.update(c, zeros, 4);
        c = crc.update(c, page + 26, size - 26);
        const uint32_t stored = static_cast<uint32_t>(page[22]) | static_cast<uint32_t>(page[23]) << 8 |
                                static_cast<uint32_t>(page[24]) << 16 | static_cast<uint32_t>(page[25]) << 24;
        if (c != stored) return Failure{kOggDamaged, pos, 0, ""};
        flags = page[5];
        pos += size;
    }
    if (!(flags & 0x04)) return Failure{kOggTruncated, 0, 0, ""};
    return Failure{};
}

// sluice.backends.audio._open: libsndfile opens the file, then the same checks.
void open_with_sndfile(File& f) {
    SF_INFO info{};
    {
        std::lock_guard<std::mutex> lock(g_open_mutex);
        f.sf = g_sf.open_virtual(&g_vio, kRead, &info, &f.mem);
        if (!f.sf) {
            f.fail(kUnsupported, 0, 0, error_string(g_sf.error(nullptr)));
            return;
        }
    }
    g_sf.command(f.sf, kSetClipping, nullptr, kTrue);
    f.header.rate = info.samplerate;
    f.header.channels = info.channels;
    f.header.frames = info.frames;
    f.major = info.format & kTypeMask;
    const int sub = info.format & kSubMask;
    f.float_source = sub == kSubFloat || sub == kSubDouble;
    if (f.major == kWav || f.major == kWavex || f.major == kRf64 || f.major == kW64) {
        std::string log(1 << 14, '\0');  // soundfile's extra_info buffer
        g_sf.command(f.sf, kGetLogInfo, &log[0], static_cast<int>(log.size()));
        log.resize(std::strlen(log.c_str()));
        uint64_t declared = 0, actual = 0;
        if (cut_data_chunk(log, declared, actual) && actual < declared && declared < 0xFFFFFFF0u) {
            f.fail(kWavTruncated, static_cast<int64_t>(declared), static_cast<int64_t>(actual));
            return;
        }
    } else if (f.major == kOgg) {
        Failure pages = ogg_pages(f.mem);
        if (pages.problem != kOk) {
            f.fail(pages.problem, pages.a, pages.b);
            return;
        }
    }
    if (info.samplerate < kMinRate || info.samplerate > kMaxRate) f.fail(kRate, info.samplerate);
}

// A FLAC that flac.cpp decodes: the samples sizes libsndfile reads (8, 16, 24 bits), a known length and a sample
// rate libsndfile would accept; false leaves every other file to libsndfile.
bool open_flac(File& f) {
    flac::StreamInfo& s = f.stream;
    if (!flac::g_native.load(std::memory_order_relaxed) || !flac::parse(f.mem.data, f.mem.size, s) ||
        !(s.bits == 8 || s.bits == 16 || s.bits == 24) || s.frames <= 0 || s.rate < kMinRate || s.rate > kMaxRate)
        return false;
    f.flac = true;
    f.header.rate = s.rate;
    f.header.channels = s.channels;
    f.header.frames = s.frames;
    return true;
}

void open_file(File& f, bool sndfile) {
    if (parse_wav(f.mem.data, f.mem.size, f.header)) return;
    if (!sndfile) {
        f.failure.problem = kNotParsed;
    } else if (f.mem.size == 0) {
        f.fail(kEmpty);
    } else if (!open_flac(f)) {
        open_with_sndfile(f);
    }
}

// What one sample's output receives: frames [start, start + n_read) of the file, then silence up to n_out.
struct Window {
    int64_t start, n_read, n_out;
};

template <class T>
sf_count_t readf(SNDFILE* sf, T* out, sf_count_t frames) {
    if constexpr (std::is_same_v<T, int16_t>) return g_sf.readf_short(sf, out, frames);
    else if constexpr (std::is_same_v<T, int32_t>) return g_sf.readf_int(sf, out, frames);
    else if constexpr (std::is_same_v<T, float>) return g_sf.readf_float(sf, out, frames);
    else return g_sf.readf_double(sf, out, frames);
}

template <class T>
constexpr Format native_format() {
    return std::is_same_v<T, int16_t> ? kS16 : std::is_same_v<T, int32_t> ? kS32 : kF32;
}

// Whether libsndfile has flagged an error on the file (then the file has failed with its message).
bool sndfile_failed(File& f) {
    int code = g_sf.error(f.sf);
    if (code) f.fail(kLibsndfile, 0, 0, error_string(code));
    return code != 0;
}

// read_into's libsndfile path: soundfile's seek, tell, tell, read, seek, with a check after each; returns the
// frames decoded into `out` (-1 when the file failed). Float files are read as doubles and converted here, so that
// their values can be checked before libsndfile clips or rounds them.
template <class T>
int64_t read_sndfile(File& f, const Window& w, bool downmix, bool finite, T* out, std::vector<uint8_t>& scratch) {
    const int64_t channels = f.header.channels;
    if (w.start > 0) {
        g_sf.seek(f.sf, w.start, SEEK_SET);
        if (sndfile_failed(f)) return -1;
    }
    const sf_count_t tell = g_sf.seek(f.sf, 0, SEEK_CUR);
    if (sndfile_failed(f)) return -1;
    const sf_count_t want = std::max<sf_count_t>(0, std::min<sf_count_t>(w.n_read, f.header.frames - tell));
    const sf_count_t at = g_sf.seek(f.sf, 0, SEEK_CUR);
    if (sndfile_failed(f)) return -1;
    const bool direct = !f.float_source && !(downmix && channels > 1);
    if (!direct) {
        const size_t width = f.float_source ? sizeof(double) : sizeof(T);
        scratch.resize(static_cast<size_t>(want * channels) * width);
    }
    const sf_count_t got = f.float_source ? readf(f.sf, reinterpret_cast<double*>(scratch.data()), want)
                           : direct       ? readf(f.sf, out, want)
                                          : readf(f.sf, reinterpret_cast<T*>(scratch.data()), want);
    if (sndfile_failed(f)) return -1;
    g_sf.seek(f.sf, at + got, SEEK_SET);
    if (sndfile_failed(f)) return -1;
    const int64_t missing = w.n_read - got;
    // An MP3 without a length header announces a length estimated from its size: a shortfall of up to 2 % (or two
    // MPEG frames) is the estimate's error and is zero-filled; anything else is a truncated file.
    if (missing > 0 && !(f.major == kMpeg && missing <= std::max<int64_t>(2 * 1152, f.header.frames / 50))) {
        f.fail(kShort, f.header.frames, w.start + got);
        return -1;
    }
    if (!direct) {
        const Format from = f.float_source ? kF64 : native_format<T>();
        const int64_t bad = convert(from, scratch.data(), got, channels, downmix, finite && f.float_source, out);
        if (bad >= 0) {
            f.fail(kNotFinite, w.start + bad);
            return -1;
        }
    }
    return got;
}

// `count` samples per channel of a FLAC frame's channels, from sample `from`, converted as libsndfile converts
// `bits`-bit FLAC samples (its flac_buffer_copy: the sample left-justified in 16 or 32 bits, or scaled by
// 2^(1 - bits) into a float, exactly) into `out`, interleaved or downmixed.
template <class T>
void convert_flac(const flac::Decoder& d, int64_t channels, int bits, int64_t from, int64_t count, bool downmix,
                  T* out) {
    const int shift = 32 - bits;
    auto as = [shift](int32_t v) { return from_int32<T>(static_cast<int32_t>(static_cast<uint32_t>(v) << shift)); };
    if (!downmix || channels == 1) {
        for (int64_t c = 0; c < channels; ++c) {
            const int32_t* s = d.channel(c) + from;
            T* o = out + c;
            if (channels == 1)
                for (int64_t i = 0; i < count; ++i) o[i] = as(s[i]);
            else
                for (int64_t i = 0; i < count; ++i) o[i * channels] = as(s[i]);
        }
        return;
    }
    double row[8];
    for (int64_t i = 0; i < count; ++i) {
        for (int64_t c = 0; c < channels; ++c) row[c] = static_cast<double>(as(d.channel(c)[from + i]));
        out[i] = mean_of<T>(row, channels);
    }
}

// The window of a FLAC decoded by flac.cpp: the frames before it skipped, those holding it decoded. Returns
// n_read, or -1 when flac.cpp refused a frame (nothing is reported: libsndfile is to decode and judge the file).
template <class T>
int64_t read_flac(const File& f, const Window& w, bool downmix, T* out) {
    flac::Decoder d(f.mem.data, f.mem.size, f.stream);
    const int64_t channels = f.header.channels, width = downmix ? 1 : channels, end = w.start + w.n_read;
    int64_t at = 0;  // the first sample of the next frame
    while (at < end) {
        int64_t n = at < w.start ? d.skip(w.start - at) : 0;  // a frame before the window, not decoded
        if (n <= 0) {
            n = d.next();
            if (n < 0) return -1;
            const int64_t lo = std::max(at, w.start), hi = std::min(at + n, end);
            if (lo < hi)
                convert_flac(d, channels, static_cast<int>(f.stream.bits), lo - at, hi - lo, downmix,
                             out + (lo - w.start) * width);
        }
        at += n;
    }
    ++flac::g_decoded;
    return w.n_read;
}

// `stream`: write a plain WAV's samples with streaming stores (see kStreamFrom).
template <class T>
void decode_file(File& f, const Window& w, bool downmix, bool finite, T* out, std::vector<uint8_t>& scratch,
                 bool stream) {
    const int64_t width = downmix ? 1 : f.header.channels;  // output samples per frame
    int64_t got = 0;
    if (w.n_read > 0 && f.flac && (got = read_flac(f, w, downmix, out)) < 0) {
        // corrupt, truncated or beyond flac.cpp: libsndfile decodes the file, or reports it in its own words
        f.flac = false;
        ++flac::g_refused;
        got = 0;
        open_with_sndfile(f);
        if (f.failed()) return;
    }
    if (w.n_read > 0 && f.sf != nullptr) {
        got = read_sndfile(f, w, downmix, finite, out, scratch);
        if (got < 0) return;
    } else if (w.n_read > 0 && !f.flac) {
        const Header& h = f.header;
        const int64_t bad = convert(h.format, f.mem.data + h.offset + w.start * h.align, w.n_read, h.channels,
                                    downmix, finite, out, stream);
        if (bad >= 0) {
            f.fail(kNotFinite, w.start + bad);
            return;
        }
        got = w.n_read;
    }
    std::fill(out + got * width, out + w.n_out * width, T(0));
}

// ------------------------------------------------------------------------------------------ a batch of files
enum OutType : int { kInt16 = 0, kInt32 = 1, kFloat32 = 2 };
const size_t kOutWidth[] = {2, 4, 4};

// The failures of files[i] for i in `which`, as {i: (problem, a, b, text)}.
py::dict failures_of(const std::vector<File>& files, const std::vector<size_t>& which) {
    py::dict out;
    for (size_t i : which) {
        const Failure& x = files[i].failure;
        if (files[i].failed())
            out[py::int_(i)] = py::make_tuple(
                kProblemNames[x.problem], x.a, x.b,
                py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(x.text.data(), x.text.size(), "replace")));
    }
    return out;
}

const int64_t* checked(const py::array_t<int64_t, py::array::c_style>& a, size_t n, const char* what) {
    if (static_cast<size_t>(a.size()) != n) throw std::invalid_argument(std::string(what) + ": one value per file");
    return a.data();
}

class AudioFiles {
public:
    // `data`: a sequence of byte buffers (one per file), or one buffer holding all files with `offsets` and
    // `sizes` giving each file's place in it.
    AudioFiles(py::object data, py::object offsets, py::object sizes) {
        using Bytes8 = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
        if (offsets.is_none()) {
            for (auto item : py::reinterpret_borrow<py::sequence>(data)) {
                Bytes8 a = Bytes8::ensure(item);
                if (!a) throw std::invalid_argument("AudioFiles: every file must be a byte buffer");
                held_.push_back(a);
                files_.emplace_back();
                files_.back().mem = Memory{a.data(), static_cast<int64_t>(a.nbytes()), 0};
            }
            return;
        }
        Bytes8 region = Bytes8::ensure(data);
        if (!region) throw std::invalid_argument("AudioFiles: the region must be a byte buffer");
        held_.push_back(region);
        py::array_t<int64_t, py::array::c_style> off(offsets), len(sizes);
        const size_t n = static_cast<size_t>(off.size());
        const int64_t* o = off.data();
        const int64_t* s = checked(len, n, "AudioFiles sizes");
        files_.resize(n);
        for (size_t i = 0; i < n; ++i) {
            if (o[i] < 0 || s[i] < 0 || o[i] + s[i] > static_cast<int64_t>(region.nbytes()))
                throw std::invalid_argument("AudioFiles: a file lies outside the region");
            files_[i].mem = Memory{region.data() + o[i], s[i], 0};
        }
    }
    ~AudioFiles() { close(); }

    // Headers of every file: (status, rate, channels, frames, failures) where status is 0 for a file to decode,
    // 1 for one that failed (failures[i] = (problem, a, b, text)), 2 (`sndfile` False) for one that is not a plain
    // WAV, left unopened.
    py::tuple open(bool sndfile) {
        if (sndfile && !g_sf_loaded) throw std::runtime_error("AudioFiles.open: libsndfile is not loaded");
        const size_t n = files_.size();
        py::array_t<int8_t> status(static_cast<py::ssize_t>(n));
        py::array_t<int64_t> rate(static_cast<py::ssize_t>(n)), channels(static_cast<py::ssize_t>(n)),
            frames(static_cast<py::ssize_t>(n));
        int8_t* st = status.mutable_data();
        int64_t *r = rate.mutable_data(), *c = channels.mutable_data(), *fr = frames.mutable_data();
        {
            py::gil_scoped_release release;
            for (size_t i = 0; i < n; ++i) {
                File& f = files_[i];
                open_file(f, sndfile);
                st[i] = f.failed() ? 1 : f.failure.problem == kNotParsed ? 2 : 0;
                r[i] = f.header.rate;
                c[i] = f.header.channels;
                fr[i] = f.header.frames;
            }
        }
        std::vector<size_t> all(n);
        for (size_t i = 0; i < n; ++i) all[i] = i;
        return py::make_tuple(status, rate, channels, frames, failures_of(files_, all));
    }

    // Where each plain WAV's samples lie: (format, byte offset of frame 0, bytes per frame); format is the index
    // in WAV_FORMATS, -1 for the other files.
    py::tuple payloads() const {
        const size_t n = files_.size();
        py::array_t<int8_t> format(static_cast<py::ssize_t>(n));
        py::array_t<int64_t> offset(static_cast<py::ssize_t>(n)), align(static_cast<py::ssize_t>(n));
        for (size_t i = 0; i < n; ++i) {
            const File& f = files_[i];
            const bool wav = f.sf == nullptr && !f.flac && !f.failed() && f.failure.problem != kNotParsed;
            format.mutable_data()[i] = wav ? f.header.format : kNone;
            offset.mutable_data()[i] = f.header.offset;
            align.mutable_data()[i] = f.header.align;
        }
        return py::make_tuple(format, offset, align);
    }

    // Decodes files [lo, hi) (opened by open(True)) into `out` at byte offsets `out_offsets`: the window of each
    // (start, n_read, n_out per file), as `dtype` (0 int16, 1 int32, 2 float32), downmixed or interleaved, values
    // of float files checked with `finite`. Returns the failures among them, as open does.
    // With `pool` (the pipeline's WorkerPool) the files are decoded on its threads and this one.
    py::dict decode(size_t lo, size_t hi, py::buffer out_buf, py::array_t<int64_t, py::array::c_style> out_offsets,
                    py::array_t<int64_t, py::array::c_style> start, py::array_t<int64_t, py::array::c_style> n_read,
                    py::array_t<int64_t, py::array::c_style> n_out, int dtype, bool downmix, bool finite,
                    py::object pool) {
        const size_t n = files_.size();
        if (lo > hi || hi > n) throw std::invalid_argument("AudioFiles.decode: [lo, hi) is not a range of files");
        if (dtype < kInt16 || dtype > kFloat32) throw std::invalid_argument("AudioFiles.decode: unknown dtype");
        Bytes out = bytes_of(out_buf, true);
        const int64_t* oo = checked(out_offsets, n, "out_offsets");
        const int64_t* s = checked(start, n, "start");
        const int64_t* nr = checked(n_read, n, "n_read");
        const int64_t* no = checked(n_out, n, "n_out");
        std::vector<size_t> todo;  // the files to decode: opened, not failed
        for (size_t i = lo; i < hi; ++i) {  // every write and read inside its buffer, before the GIL goes
            const File& f = files_[i];
            if (f.failed() || f.failure.problem == kNotParsed) continue;
            todo.push_back(i);
            const int64_t width = downmix ? 1 : f.header.channels;
            const uint64_t end = static_cast<uint64_t>(oo[i]) + static_cast<uint64_t>(no[i] * width) * kOutWidth[dtype];
            if (oo[i] < 0 || oo[i] % static_cast<int64_t>(kOutWidth[dtype]) != 0 || s[i] < 0 || nr[i] < 0 ||
                nr[i] > no[i] || s[i] + nr[i] > f.header.frames || end > out.size)
                throw std::invalid_argument("AudioFiles.decode: a window lies outside its file or its output");
        }
        WorkerPool* workers = pool_of(pool);
        {
            py::gil_scoped_release release;
            const bool stream = out.size >= kStreamFrom;
            auto one = [&](size_t k) {
                thread_local std::vector<uint8_t> scratch;
                File& f = files_[todo[k]];
                const size_t i = todo[k];
                const Window w{s[i], nr[i], no[i]};
                uint8_t* dst = out.data + oo[i];
                if (dtype == kInt16)
                    decode_file(f, w, downmix, finite, reinterpret_cast<int16_t*>(dst), scratch, stream);
                else if (dtype == kInt32)
                    decode_file(f, w, downmix, finite, reinterpret_cast<int32_t*>(dst), scratch, stream);
                else
                    decode_file(f, w, downmix, finite, reinterpret_cast<float*>(dst), scratch, stream);
            };
            if (workers != nullptr) {
                workers->run(todo.size(), one);
            } else {
                for (size_t k = 0; k < todo.size(); ++k) one(k);
            }
        }
        return failures_of(files_, todo);
    }

    void close() {
        for (File& f : files_) f.close();
    }

private:
    std::vector<py::object> held_;  // the buffers the files lie in, alive while this object is
    std::vector<File> files_;       // never resized after construction: libsndfile holds pointers to `mem`
};

// ------------------------------------------------------------------------------------- output buffers
// A batch's output (113 MB for 64 clips of 10 s as float32) written into fresh memory costs a page fault per 4 KiB
// on first touch: 8x the conversion itself. torch's CPU allocator hands such blocks back to the kernel when freed,
// so every batch faults again. Blocks here are kept when their array dies and handed out again, like torch's
// caching host allocator does for page-locked memory.
class BlockCache {
public:
    // A block of at least `n` bytes: a free one no more than twice as large, else a new one. (Marking new blocks
    // for transparent huge pages made their first use slower, 0.5 s for 113 MB, where the kernel compacts memory
    // for them on fault.)
    std::pair<void*, size_t> take(size_t n) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = free_.lower_bound(n);
            if (it != free_.end() && it->first <= 2 * n + kAlign) {
                auto block = std::make_pair(it->second, it->first);
                cached_ -= it->first;
                free_.erase(it);
                return block;
            }
        }
        const size_t size = (std::max<size_t>(n, 1) + kAlign - 1) / kAlign * kAlign;
        void* p = nullptr;
        if (posix_memalign(&p, kAlign, size) != 0) throw std::bad_alloc();
        return {p, size};
    }
    // Keeps a block for reuse, unless the free ones already hold kLimit bytes.
    void give(void* p, size_t size) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (cached_ + size <= kLimit) {
                free_.emplace(size, p);
                cached_ += size;
                return;
            }
        }
        std::free(p);
    }

private:
    static constexpr size_t kAlign = size_t(64) << 10;  // page-aligned, sizes in steps of 64 KiB
    static constexpr size_t kLimit = size_t(1) << 30;  // free bytes kept at most
    std::mutex mutex_;
    std::multimap<size_t, void*> free_;
    size_t cached_ = 0;
};
BlockCache g_blocks;

struct Block {
    void* data;
    size_t size;
};

// An uninitialised uint8 array of `nbytes` bytes in a recycled block: the block goes back to the cache when the
// array (and everything viewing it, torch tensors from torch.from_numpy included) is gone.
py::array_t<uint8_t> host_buffer(size_t nbytes) {
    auto taken = g_blocks.take(nbytes);
    auto* block = new Block{taken.first, taken.second};
    py::capsule owner(block, [](void* b) {
        auto* blk = static_cast<Block*>(b);
        g_blocks.give(blk->data, blk->size);
        delete blk;
    });
    return py::array_t<uint8_t>({static_cast<py::ssize_t>(nbytes)}, {1}, static_cast<uint8_t*>(block->data), owner);
}

}  // namespace

void register_audio(py::module_& m) {
    m.def("host_buffer", &host_buffer, py::arg("nbytes"),
          "An uninitialised uint8 array in a recycled block (no page faults when a batch's output is made again).");
    m.def("load_sndfile", &load_sndfile, py::arg("path"),
          "Open libsndfile (soundfile's copy) for AudioFiles; returns '' or why it could not be opened.");
    py::list problems;
    for (const char* name : kProblemNames) problems.append(name);
    m.attr("AUDIO_PROBLEMS") = py::tuple(problems);
    m.attr("WAV_FORMATS") = py::make_tuple("u8", "s16", "s24", "s32", "f32", "f64");
    py::class_<AudioFiles>(m, "AudioFiles",
                           "The encoded audio files of a batch: headers in one call, then decoding in chunks "
                           "(sluice.native.audio).")
        .def(py::init<py::object, py::object, py::object>(), py::arg("data"), py::arg("offsets") = py::none(),
             py::arg("sizes") = py::none())
        .def("open", &AudioFiles::open, py::arg("sndfile") = true)
        .def("payloads", &AudioFiles::payloads)
        .def("decode", &AudioFiles::decode, py::arg("lo"), py::arg("hi"), py::arg("out"), py::arg("out_offsets"),
             py::arg("start"), py::arg("n_read"), py::arg("n_out"), py::arg("dtype"), py::arg("downmix"),
             py::arg("finite"), py::arg("pool") = py::none())
        .def("close", &AudioFiles::close);
}

}  // namespace sluice
