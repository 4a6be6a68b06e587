// Shared declarations of sluice's compiled core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace py = pybind11;

namespace sluice {

// Each part of the core registers its functions (one source file each).
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
