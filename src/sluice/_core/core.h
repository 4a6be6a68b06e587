// Shared declarations of sluice's compiled core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace py = pybind11;

namespace sluice {

// Each part of the core registers its functions (one source file each).
// NumPy's Philox4x64-10 (numpy/random/src/philox): ten rounds, the key bumped by the Weyl constants between them.
struct Philox {
    uint64_t ctr[4];
    uint64_t key[2];

    static void round(uint64_t* c, const uint64_t* k) {
        __uint128_t p0 = static_cast<__uint128_t>(0xD2E7470EE14C6C93ULL) * c[0];
        __uint128_t p1 = static_cast<__uint128_t>(0xCA5A826395121157ULL) * c[2];
        uint64_t hi0 = static_cast<uint64_t>(p0 >> 64), lo0 = static_cast<uint64_t>(p0);
        uint64_t hi1 = static_cast<uint64_t>(p1 >> 64), lo1 = static_cast<uint64_t>(p1);
        uint64_t out[4] = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
        std::memcpy(c, out, sizeof(out));
    }

    // The 64-bit value number `index` of the stream (NumPy increments the counter before each block of four).
    uint64_t value(uint64_t index) const {
        uint64_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
        uint64_t blocks = index / 4 + 1;
        uint64_t before = c[0];
        c[0] += blocks;
        if (c[0] < before && ++c[1] == 0 && ++c[2] == 0) ++c[3];  // carry, as NumPy does
        uint64_t k[2] = {key[0], key[1]};
        round(c, k);
        for (int r = 1; r < 10; ++r) {
            k[0] += 0x9E3779B97F4A7C15ULL;
            k[1] += 0xBB67AE8584CAA73BULL;
            round(c, k);
        }
        return c[index % 4];
    }

    // Generator.random(): the top 53 bits of a 64-bit value, scaled to [0, 1).
    double uniform(uint64_t index) const { return static_cast<double>(value(index) >> 11) * (1.0 / 9007199254740992.0); }
};

// A NumPy Generator over Philox from its fresh state (the values of sluice.schema._rng(seed, iteration, sample)),
// draw for draw: next64 takes the stream's values in order, next32 halves one and keeps the high half for the next
// call (numpy's philox_next32), integers and uniform are Generator.integers(high) and Generator.uniform(lo, hi).
struct NumpyStream {
    Philox bits;
    uint64_t next = 0;
    bool has32 = false;
    uint32_t high32 = 0;

    uint64_t next64() { return bits.value(next++); }
    uint32_t next32() {
        if (has32) {
            has32 = false;
            return high32;
        }
        uint64_t v = next64();
        has32 = true;
        high32 = static_cast<uint32_t>(v >> 32);
        return static_cast<uint32_t>(v & 0xFFFFFFFFULL);
    }
    double next_double() { return static_cast<double>(next64() >> 11) * (1.0 / 9007199254740992.0); }
    double uniform(double lo, double hi) {
        double range = hi - lo;
        return lo + range * next_double();
    }
    // Generator.integers(high) for 1 <= high <= 2^32 - 1: Lemire's rejection on 32-bit draws, no draw for high 1.
    int64_t integers(int64_t high) {
        const uint32_t rng = static_cast<uint32_t>(high - 1);
        if (rng == 0) return 0;
        const uint32_t excl = rng + 1;
        uint64_t m = static_cast<uint64_t>(next32()) * excl;
        uint32_t leftover = static_cast<uint32_t>(m & 0xFFFFFFFFULL);
        if (leftover < excl) {
            const uint32_t threshold = (UINT32_MAX - rng) % excl;
            while (leftover < threshold) {
                m = static_cast<uint64_t>(next32()) * excl;
                leftover = static_cast<uint32_t>(m & 0xFFFFFFFFULL);
            }
        }
        return static_cast<int64_t>(m >> 32);
    }
};

void register_detection(py::module_& m);  // detection.cpp: random_bbox_crop windows, box encoding
void register_io(py::module_& m);      // io.cpp: reading files into batch buffers
void register_image(py::module_& m);   // image.cpp: image headers, random crop windows
void register_jpeg(py::module_& m);    // jpeg.cpp: libjpeg decoding of (windows of) JPEGs
void register_resize(py::module_& m);  // resize.cpp: separable antialiased resampling of uint8 images
void register_audio(py::module_& m);   // audio.cpp: WAV parsing and PCM conversion, libsndfile decoding
void register_flac(py::module_& m);    // flac.cpp: sluice's own FLAC decoder (used by audio.cpp)
void register_signal(py::module_& m);  // signal.cpp: per-signal analysis of packed batches (nonsilent_region)

// A writable or read-only byte buffer's address and size (anything with the buffer protocol).
struct Bytes {
    uint8_t* data;
    size_t size;
};
inline Bytes bytes_of(const py::buffer& b, bool writable) {
    py::buffer_info info = b.request(writable);
    return Bytes{static_cast<uint8_t*>(info.ptr), static_cast<size_t>(info.size * info.itemsize)};
}

// The compiled core's worker threads, one set per pipeline (its runtime makes it with num_threads and closes it
// with the pipeline): a batch kernel called from Python runs its items on them and on the calling thread with the
// GIL released, and returns once all are done, so that the GIL is taken once per kernel call, not once per pool
// thread and chunk (with 16 threads, waiting to take it back cost the pool threads more than the work). The workers
// never touch Python. Several callers (the pipeline's stage threads) may run jobs at once: the workers take items
// from any job that has some left, oldest first. In a process forked from the one that made the pool (whose
// workers fork did not copy) the caller runs every item itself.
class WorkerPool {
public:
    using Item = std::function<void(size_t)>;
    explicit WorkerPool(size_t threads);
    ~WorkerPool();
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;
    size_t threads() const { return workers_.size() + 1; }
    // Runs item(i) for i in [0, n) on the workers and the calling thread (call it with the GIL released);
    // rethrows the first exception an item threw, once every item has finished.
    void run(size_t n, const Item& item);
    void close();

private:
    struct Job;
    void loop();
    bool work_on(Job& job);
    std::vector<std::thread> workers_;
    std::mutex m_;
    std::condition_variable wake_;
    std::vector<Job*> jobs_;
    bool stop_ = false;
    long owner_pid_;
};

// A core function's optional `pool` argument: the WorkerPool, or nullptr for None.
WorkerPool* pool_of(const py::object& pool);

void register_pool(py::module_& m);     // pool.cpp: WorkerPool for Python

}  // namespace sluice
