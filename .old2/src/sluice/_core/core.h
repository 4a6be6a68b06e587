// Shared declarations of sluice's compiled core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>

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

}  // namespace sluice
