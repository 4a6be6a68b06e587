// sluice's own FLAC decoder: native FLAC streams (RFC 9639) held in memory, decoded frame by frame into per-channel
// int32 samples, with the GIL released by its caller (audio.cpp, which converts the samples into a batch's output).
//
// Handled: fixed and variable block sizes, 4-32 bits per sample, 1-8 channels with independent, left-side,
// right-side and mid-side coding, CONSTANT, VERBATIM, FIXED (orders 0-4) and LPC (orders 1-32) subframes, wasted
// bits, Rice and Rice2 partitions with escape codes; every frame's header CRC-8 and CRC-16 are checked. A frame this
// decoder refuses (corrupt, truncated, 32-bit samples with stereo decorrelation) makes the caller hand the stream
// to libsndfile, which decodes or reports it with its own words.
#include "flac.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core.h"

namespace sluice {
namespace flac {

std::atomic<bool> g_native{true};
std::atomic<int64_t> g_decoded{0}, g_refused{0};

namespace {

// ------------------------------------------------------------------------------------------------ CRCs
// CRC-8 (polynomial 0x07) of frame headers; CRC-16 (polynomial 0x8005) of whole frames, eight bytes a step:
// kCrc16[k][b] is the CRC of byte b followed by k zero bytes.
struct CrcTables {
    uint8_t crc8[256];
    uint16_t crc16[8][256];
    CrcTables() {
        for (int b = 0; b < 256; ++b) {
            unsigned c8 = b, c16 = b << 8;
            for (int i = 0; i < 8; ++i) {
                c8 = (c8 << 1) ^ ((c8 & 0x80) ? 0x07 : 0);
                c16 = (c16 << 1) ^ ((c16 & 0x8000) ? 0x8005 : 0);
            }
            crc8[b] = static_cast<uint8_t>(c8);
            crc16[0][b] = static_cast<uint16_t>(c16);
        }
        for (int k = 1; k < 8; ++k)
            for (int b = 0; b < 256; ++b) {
                const unsigned prev = crc16[k - 1][b];
                crc16[k][b] = static_cast<uint16_t>((prev << 8) ^ crc16[0][prev >> 8]);
            }
    }
};
const CrcTables kCrc;

uint8_t crc8(const uint8_t* p, int64_t n) {
    unsigned c = 0;
    for (int64_t i = 0; i < n; ++i) c = kCrc.crc8[c ^ p[i]];
    return static_cast<uint8_t>(c);
}

// A frame's bytes followed by its CRC-16 (big-endian) give 0.
uint16_t crc16(const uint8_t* p, int64_t n) {
    unsigned c = 0;
    const auto& t = kCrc.crc16;
    for (; n >= 8; n -= 8, p += 8)
        c = t[7][(c >> 8) ^ p[0]] ^ t[6][(c & 0xFF) ^ p[1]] ^ t[5][p[2]] ^ t[4][p[3]] ^ t[3][p[4]] ^ t[2][p[5]] ^
            t[1][p[6]] ^ t[0][p[7]];
    for (; n > 0; --n, ++p) c = ((c << 8) & 0xFFFF) ^ t[0][(c >> 8) ^ *p];
    return static_cast<uint16_t>(c);
}

// ------------------------------------------------------------------------------------------ bit reader
// Reads MSB-first from a 64-bit cache holding `bits_` unread bits at its top (the bits below them, when not zero,
// are the stream's next bits too). Past the end of the data it reads zeros; overrun() says so.
class Bits {
public:
    Bits(const uint8_t* data, int64_t size, int64_t at) : data_(data), size_(size), pos_(at) {}

    int64_t position() const { return pos_ * 8 - bits_; }  // in bits
    bool overrun() const { return position() > size_ * 8; }

    void refill() {
        if (pos_ + 8 <= size_) {
            uint64_t w;
            std::memcpy(&w, data_ + pos_, 8);
            cache_ |= __builtin_bswap64(w) >> bits_;
            pos_ += (63 - bits_) >> 3;
            bits_ |= 56;
            return;
        }
        while (bits_ <= 56) {
            const uint64_t b = pos_ < size_ ? data_[pos_] : 0;
            cache_ |= b << (56 - bits_);
            ++pos_;
            bits_ += 8;
        }
    }

    // n <= 32 bits, unsigned.
    uint32_t read(int n) {
        if (n == 0) return 0;
        if (bits_ < n) refill();
        const uint32_t v = static_cast<uint32_t>(cache_ >> (64 - n));
        cache_ <<= n;
        bits_ -= n;
        return v;
    }
    // n <= 32 bits, two's complement.
    int32_t read_signed(int n) {
        if (n == 0) return 0;
        const uint32_t v = read(n) << (32 - n);
        return static_cast<int32_t>(v) >> (32 - n);
    }
    // The zeros before the next one (which is consumed); stops growing past the end of the data.
    uint32_t unary() {
        uint32_t zeros = 0;
        for (;;) {
            if (cache_ != 0) {
                const int z = __builtin_clzll(cache_);
                if (z < bits_) {
                    cache_ = (cache_ << z) << 1;
                    bits_ -= z + 1;
                    return zeros + static_cast<uint32_t>(z);
                }
            }
            zeros += static_cast<uint32_t>(bits_);
            cache_ = 0;
            bits_ = 0;
            if (pos_ > size_ + 8) return zeros;  // the data ended: overrun() fails the frame
            refill();
        }
    }
    // n Rice-coded residuals with parameter k (<= 30), each stored as predict(residual).
    template <class Predict>
    void rice(int32_t* s, int64_t n, int k, Predict& predict) {
        Bits in = *this;  // a local copy stays in registers (stores to s could alias the members)
        in.rice_(s, n, k, predict);
        *this = in;
    }
    void align() { read(static_cast<int>(position() & 7) ? 8 - static_cast<int>(position() & 7) : 0); }

private:
    template <class Predict>
    void rice_(int32_t* s, int64_t n, int k, Predict& predict) {
        for (int64_t i = 0; i < n; ++i) {
            if (bits_ < 40) refill();
            const int z = cache_ ? __builtin_clzll(cache_) : 64;
            uint32_t u;
            if (z + 1 + k <= bits_) {  // the quotient's zeros, its one and the k low bits are all in the cache
                const uint64_t rest = (cache_ << z) << 1;
                u = (static_cast<uint32_t>(z) << k) | static_cast<uint32_t>((rest >> 1) >> (63 - k));
                cache_ = rest << k;
                bits_ -= z + 1 + k;
            } else {
                const uint32_t high = unary() << k;
                u = high | read(k);
            }
            s[i] = predict(static_cast<int32_t>((u >> 1) ^ (0u - (u & 1))));  // zigzag
        }
    }

    const uint8_t* data_;
    int64_t size_;
    int64_t pos_;  // next byte to load into the cache
    uint64_t cache_ = 0;
    int bits_ = 0;
};

// ------------------------------------------------------------------------------------------ subframes
// Predictors: each takes a sample's residual and returns the sample, keeping the last samples (its history) in
// registers. Their arithmetic wraps in 32 bits, which is exact whenever the stream is valid (its samples fit).
struct Verbatim {
    int32_t operator()(int32_t r) { return r; }
};

// FIXED subframes: the polynomial predictors of orders 1-4.
template <int Order>
struct Fixed {
    uint32_t h[4];  // h[Order - 1] is the last sample
    explicit Fixed(const int32_t* warmup) {
        for (int k = 0; k < Order; ++k) h[k] = static_cast<uint32_t>(warmup[k]);
    }
    int32_t operator()(int32_t r) {
        uint32_t p;
        if constexpr (Order == 1) p = h[0];
        else if constexpr (Order == 2) p = 2 * h[1] - h[0];
        else if constexpr (Order == 3) p = 3 * (h[2] - h[1]) + h[0];
        else p = 4 * (h[3] + h[1]) - 6 * h[2] - h[0];
        const uint32_t v = static_cast<uint32_t>(r) + p;
        for (int k = 0; k + 1 < Order; ++k) h[k] = h[k + 1];
        h[Order - 1] = v;
        return static_cast<int32_t>(v);
    }
};

// LPC subframes: (sum of coef[j] * s[i - 1 - j]) >> shift, the dot product unrolled at a compile-time order, the
// newest sample's product added last (the dependency from one sample to the next is one multiply, add, shift,
// add). Mul is int64_t where 32 bits could overflow (libFLAC's rule: bits + precision + log2(order) > 32), else
// uint32_t, wrapping, exact as the sum then fits.
template <int Order, class Mul>
struct Lpc {
    const Mul* c;  // c[k] multiplies h[k] (read from memory: the history keeps the registers)
    Mul h[Order];  // h[Order - 1] is the last sample
    int shift;
    Lpc(const int32_t* warmup, const Mul* coef, int shift_) : c(coef), shift(shift_) {
        for (int k = 0; k < Order; ++k) h[k] = static_cast<Mul>(warmup[k]);
    }
    int32_t operator()(int32_t r) {
        Mul sum = 0;
        for (int k = 0; k < Order; ++k) sum += c[k] * h[k];
        int32_t pred;
        if constexpr (std::is_same_v<Mul, int64_t>) pred = static_cast<int32_t>(sum >> shift);
        else pred = static_cast<int32_t>(sum) >> shift;
        const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(r) + static_cast<uint32_t>(pred));
        for (int k = 0; k + 1 < Order; ++k) h[k] = h[k + 1];
        h[Order - 1] = static_cast<Mul>(v);
        return v;
    }
};

// The residuals of `block` samples after `order` warm-up samples, each turned into s[i] by `predict` as it is read
// (the bit parsing and the predictor's dependency chain then overlap).
template <class Predict>
bool residual(Bits& in, int32_t* s, int64_t block, int order, Predict predict) {
    const uint32_t method = in.read(2);
    if (method > 1) return false;
    const int param_bits = method ? 5 : 4;
    const uint32_t escape = method ? 31 : 15;
    const int porder = static_cast<int>(in.read(4));
    const int64_t psize = block >> porder;
    if ((psize << porder) != block || psize < order) return false;
    int64_t i = order;
    for (int p = 0; p < (1 << porder); ++p) {
        const int64_t end = (p + 1) * psize;
        const uint32_t k = in.read(param_bits);
        if (k == escape) {
            const int raw = static_cast<int>(in.read(5));
            for (; i < end; ++i) s[i] = predict(in.read_signed(raw));
        } else {
            in.rice(s + i, end - i, static_cast<int>(k), predict);
            i = end;
        }
    }
    return true;
}

// A predicted subframe: `order` warm-up samples of `bits` bits, then what `make(warmup)` predicts.
template <class Make>
bool predicted(Bits& in, int32_t* s, int64_t block, int order, int bits, Make make) {
    if (order > block) return false;
    for (int i = 0; i < order; ++i) s[i] = in.read_signed(bits);
    return residual(in, s, block, order, make(s));
}

template <int Order>
bool fixed(Bits& in, int32_t* s, int64_t block, int bits) {
    return predicted(in, s, block, Order, bits, [](const int32_t* w) {
        if constexpr (Order == 0) return Verbatim{};
        else return Fixed<Order>(w);
    });
}

constexpr int ilog2(unsigned v) { return 31 - __builtin_clz(v); }

template <int Order>
bool lpc(Bits& in, int32_t* s, int64_t block, int bits) {
    if (Order > block) return false;
    for (int i = 0; i < Order; ++i) s[i] = in.read_signed(bits);
    const int precision = static_cast<int>(in.read(4)) + 1;
    const int shift = in.read_signed(5);
    if (precision == 16 || shift < 0) return false;
    int64_t wide[Order];  // the coefficients in the order of the history: wide[Order - 1] for the last sample
    uint32_t narrow[Order];
    for (int i = 0; i < Order; ++i) {
        wide[Order - 1 - i] = in.read_signed(precision);
        narrow[Order - 1 - i] = static_cast<uint32_t>(wide[Order - 1 - i]);
    }
    if (bits + precision + ilog2(Order) > 32) return residual(in, s, block, Order, Lpc<Order, int64_t>(s, wide, shift));
    return residual(in, s, block, Order, Lpc<Order, uint32_t>(s, narrow, shift));
}

using SubframeFn = bool (*)(Bits&, int32_t*, int64_t, int);
template <int... Orders>
constexpr std::array<SubframeFn, sizeof...(Orders)> lpc_table(std::integer_sequence<int, Orders...>) {
    return {&lpc<Orders + 1>...};
}
const auto kLpc = lpc_table(std::make_integer_sequence<int, 32>{});
const SubframeFn kFixed[5] = {&fixed<0>, &fixed<1>, &fixed<2>, &fixed<3>, &fixed<4>};

// One subframe of `block` samples of `bits` bits into s.
bool subframe(Bits& in, int32_t* s, int64_t block, int bits) {
    if (in.read(1) != 0) return false;
    const uint32_t type = in.read(6);
    int wasted = 0;
    if (in.read(1)) {
        wasted = static_cast<int>(in.unary()) + 1;
        if (wasted >= bits) return false;
        bits -= wasted;
    }
    if (type == 0) {  // CONSTANT
        const int32_t v = in.read_signed(bits);
        std::fill(s, s + block, v);
    } else if (type == 1) {  // VERBATIM
        for (int64_t i = 0; i < block; ++i) s[i] = in.read_signed(bits);
    } else if (type >= 8 && type <= 12) {  // FIXED
        if (!kFixed[type - 8](in, s, block, bits)) return false;
    } else if (type >= 32) {  // LPC
        if (!kLpc[type - 32](in, s, block, bits)) return false;
    } else {
        return false;  // reserved
    }
    if (wasted) {
        uint32_t* u = reinterpret_cast<uint32_t*>(s);
        for (int64_t i = 0; i < block; ++i) u[i] <<= wasted;
    }
    return true;
}

// Frame header fields coded in tables.
constexpr int64_t kSampleBits[8] = {0, 8, 12, 0, 16, 20, 24, 32};  // 0 at 0: STREAMINFO's; 0 at 3: reserved

}  // namespace

// ----------------------------------------------------------------------------------------- metadata
bool parse(const uint8_t* data, int64_t size, StreamInfo& info) {
    int64_t at = 0;
    if (size >= 10 && std::memcmp(data, "ID3", 3) == 0) {  // ID3v2: a 10-byte header, a syncsafe size, a footer
        for (int i = 6; i < 10; ++i)
            if (data[i] & 0x80) return false;
        at = 10 + ((int64_t(data[6]) << 21) | (int64_t(data[7]) << 14) | (int64_t(data[8]) << 7) | data[9]) +
             ((data[5] & 0x10) ? 10 : 0);
    }
    if (at + 4 + 38 > size || std::memcmp(data + at, "fLaC", 4) != 0) return false;
    at += 4;
    bool streaminfo = false, last = false;
    while (!last) {
        if (at + 4 > size) return false;
        last = data[at] & 0x80;
        const int type = data[at] & 0x7F;
        const int64_t length = (int64_t(data[at + 1]) << 16) | (int64_t(data[at + 2]) << 8) | data[at + 3];
        const uint8_t* b = data + at + 4;
        if (at + 4 + length > size || type == 127 || (type == 0) == streaminfo) return false;  // STREAMINFO first
        if (type == 0) {
            if (length != 34) return false;
            streaminfo = true;
            info.min_block = (b[0] << 8) | b[1];
            info.max_block = (b[2] << 8) | b[3];
            info.rate = (int64_t(b[10]) << 12) | (int64_t(b[11]) << 4) | (b[12] >> 4);
            info.channels = ((b[12] >> 1) & 7) + 1;
            info.bits = (((b[12] & 1) << 4) | (b[13] >> 4)) + 1;
            info.frames = (int64_t(b[13] & 0x0F) << 32) | (int64_t(b[14]) << 24) | (int64_t(b[15]) << 16) |
                          (int64_t(b[16]) << 8) | b[17];
            if (info.min_block < 16 || info.max_block < info.min_block || info.bits < 4) return false;
        }
        at += 4 + length;
    }
    info.first_frame = at;
    return streaminfo;
}

// ------------------------------------------------------------------------------------------- frames
Decoder::Decoder(const uint8_t* data, int64_t size, const StreamInfo& info)
    : data_(data), size_(size), info_(info), pos_(info.first_frame) {}

// The frame header at byte `at`, checked (sync, reserved values, CRC-8, the stream's channels and sample size, the
// frame or sample number that follows the frames read so far).
bool Decoder::header(int64_t at, Header& h) const {
    const uint8_t* b = data_ + at;
    const int64_t left = size_ - at;
    if (left < 6 || b[0] != 0xFF || (b[1] & 0xFE) != 0xF8) return false;
    const bool variable = b[1] & 1;
    const int block_code = b[2] >> 4, rate_code = b[2] & 15, assignment = b[3] >> 4, size_code = (b[3] >> 1) & 7;
    if (block_code == 0 || rate_code == 15 || assignment > 10 || size_code == 3 || (b[3] & 1)) return false;
    // The frame or sample number, UTF-8 coded (up to 7 bytes: 36 bits).
    int64_t i = 4;
    const unsigned lead = b[i++];
    int more = 0;
    uint64_t number = lead;
    if (lead >= 0x80) {
        if (lead == 0xFF || (lead & 0xC0) == 0x80) return false;
        more = lead == 0xFE ? 6 : __builtin_clz(~(lead << 24)) - 1;
        number = lead & (0x3F >> more);
        for (int k = 0; k < more; ++k, ++i) {
            if (i >= left || (b[i] & 0xC0) != 0x80) return false;
            number = (number << 6) | (b[i] & 0x3F);
        }
    }
    if ((!variable && more > 5)) return false;
    int64_t block;
    if (block_code == 1) block = 192;
    else if (block_code <= 5) block = int64_t(576) << (block_code - 2);
    else if (block_code >= 8) block = int64_t(256) << (block_code - 8);
    else {
        const int n = block_code == 6 ? 1 : 2;
        if (i + n > left) return false;
        block = (n == 1 ? b[i] : (b[i] << 8) | b[i + 1]) + 1;
        i += n;
    }
    if (rate_code == 12) i += 1;
    else if (rate_code == 13 || rate_code == 14) i += 2;
    if (i + 1 > left || crc8(b, i) != b[i]) return false;
    h.block = block;
    h.channels = assignment <= 7 ? assignment + 1 : 2;
    h.bits = size_code ? kSampleBits[size_code] : info_.bits;
    h.assignment = assignment <= 7 ? 0 : assignment;
    h.number = static_cast<int64_t>(number);
    h.size = i + 1;
    return h.channels == info_.channels && h.bits == info_.bits &&
           h.number == (variable ? sample_ : frame_);
}

int64_t Decoder::next() {
    Header h;
    if (!header(pos_, h)) return -1;
    const int64_t channels = h.channels;
    if (stride_ < h.block) {
        stride_ = std::max(h.block, info_.max_block);
        samples_.resize(static_cast<size_t>(stride_ * channels));
    }
    Bits in(data_, size_, pos_ + h.size);
    for (int64_t c = 0; c < channels; ++c) {
        // The side channel carries one more bit.
        const bool side = (h.assignment == 8 && c == 1) || (h.assignment == 9 && c == 0) ||
                          (h.assignment == 10 && c == 1);
        const int bits = static_cast<int>(h.bits) + side;
        if (bits > 32) return -1;
        if (!subframe(in, samples_.data() + c * stride_, h.block, bits)) return -1;
    }
    in.align();
    in.read(16);  // the CRC-16
    if (in.overrun()) return -1;
    const int64_t end = in.position() / 8;
    if (crc16(data_ + pos_, end - pos_) != 0) return -1;
    if (h.assignment) {  // stereo decorrelation (wrapping arithmetic, exact for valid streams)
        uint32_t* a = reinterpret_cast<uint32_t*>(samples_.data());
        uint32_t* b = a + stride_;
        const int64_t n = h.block;
        if (h.assignment == 8) {  // left, side
            for (int64_t i = 0; i < n; ++i) b[i] = a[i] - b[i];
        } else if (h.assignment == 9) {  // side, right
            for (int64_t i = 0; i < n; ++i) a[i] += b[i];
        } else {  // mid, side
            for (int64_t i = 0; i < n; ++i) {
                const uint32_t mid = (a[i] << 1) | (b[i] & 1), side = b[i];
                a[i] = static_cast<uint32_t>(static_cast<int32_t>(mid + side) >> 1);
                b[i] = static_cast<uint32_t>(static_cast<int32_t>(mid - side) >> 1);
            }
        }
    }
    if (h.bits < 32) {  // samples beyond the bit depth: libFLAC refuses such a frame
        const uint32_t half = 1u << (h.bits - 1);
        uint32_t beyond = 0;
        for (int64_t c = 0; c < channels; ++c) {
            const uint32_t* u = reinterpret_cast<const uint32_t*>(channel(c));
            for (int64_t i = 0; i < h.block; ++i) beyond |= (u[i] + half) >> h.bits;
        }
        if (beyond) return -1;
    }
    pos_ = end;
    ++frame_;
    sample_ += h.block;
    return h.block;
}

int64_t Decoder::skip(int64_t most) {
    Header h, following;
    if (!header(pos_, h)) return -1;
    if (h.block > most) return 0;
    // The next frame's header, found by its sync code, with the numbers of a frame after this one.
    ++frame_;
    sample_ += h.block;
    int64_t end = -1;
    for (int64_t at = pos_ + h.size + 2; at + 2 <= size_; ++at) {
        const void* ff = std::memchr(data_ + at, 0xFF, static_cast<size_t>(size_ - at));
        if (!ff) break;
        at = static_cast<const uint8_t*>(ff) - data_;
        if (header(at, following) && crc16(data_ + pos_, at - pos_) == 0) {
            end = at;
            break;
        }
    }
    if (end < 0 && crc16(data_ + pos_, size_ - pos_) == 0) end = size_;  // the last frame
    if (end < 0) {
        --frame_;
        sample_ -= h.block;
        return -1;
    }
    pos_ = end;
    return h.block;
}

}  // namespace flac

void register_flac(py::module_& m) {
    m.def(
        "native_flac",
        [](py::object enabled) {
            const bool before = flac::g_native.load();
            if (!enabled.is_none()) flac::g_native.store(enabled.cast<bool>());
            return before;
        },
        py::arg("enabled") = py::none(),
        "Whether AudioFiles decodes FLAC with sluice's own decoder (True, the default) or through libsndfile; "
        "sets it when `enabled` is given and returns the setting before. For benchmarks and tests.");
    m.def(
        "flac_counts", [] { return py::make_tuple(flac::g_decoded.load(), flac::g_refused.load()); },
        "(windows of files decoded by sluice's FLAC decoder, files it refused and left to libsndfile) so far.");
}

}  // namespace sluice
