// Shared declarations of sluice's compiled core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

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

// The items [0, n) of a batch kernel, taken one at a time by whichever pool thread asks next. Each pool thread
// makes ONE call into the core for the whole batch and loops there, the GIL released, taking items until none is
// left (a call per chunk took the GIL back per chunk: with 16 threads, waiting for it cost more than the work).
// take() returns n once none is left; done() counts an item finished; wait() blocks until all are.
class ItemQueue {
public:
    explicit ItemQueue(size_t n) : n_(n) {}
    size_t size() const { return n_; }
    size_t left() const { return n_ - std::min(next_.load(), n_); }
    size_t take() { return std::min(next_.fetch_add(1), n_); }
    void done() {
        std::lock_guard<std::mutex> lock(m_);
        if (++finished_ == n_) all_done_.notify_all();
    }
    // Ends the queue early (a caller that failed): nothing more is handed out and wait() returns.
    void cancel() {
        next_.store(n_);
        std::lock_guard<std::mutex> lock(m_);
        cancelled_ = true;
        all_done_.notify_all();
    }
    void wait() {
        py::gil_scoped_release release;
        std::unique_lock<std::mutex> lock(m_);
        all_done_.wait(lock, [this] { return finished_ >= n_ || cancelled_; });
    }

private:
    size_t n_;
    std::atomic<size_t> next_{0};
    size_t finished_ = 0;
    bool cancelled_ = false;
    std::mutex m_;
    std::condition_variable all_done_;
};

void register_queue(py::module_& m);    // module.cpp: ItemQueue for Python

}  // namespace sluice
