// sluice._core: the per-sample host work of a batch (reading files, parsing headers, drawing crop windows,
// decoding and converting), done in C++ with the GIL released, one call per batch or per chunk of a batch.
// Links neither CUDA nor torch; the codec libraries it uses (libjpeg, libsndfile) are opened at run time from the
// wheels Python already loaded. Every function has a pure-Python twin in sluice.native giving identical results.
#include "core.h"

namespace sluice {
void register_queue(py::module_& m) {
    py::class_<ItemQueue>(m, "ItemQueue",
                          "The items [0, n) of a batch kernel, taken one by one by the threads that call it with "
                          "this queue (sluice.pipeline.pool.share_items).")
        .def(py::init<size_t>(), py::arg("n"))
        .def("__len__", &ItemQueue::size)
        .def("left", &ItemQueue::left, "Items not yet taken.")
        .def("wait", &ItemQueue::wait, "Blocks (the GIL released) until every item is done or the queue is cancelled.")
        .def("cancel", &ItemQueue::cancel);
}
}  // namespace sluice

PYBIND11_MODULE(_core, m) {
    m.doc() = "sluice's compiled core (see sluice.native)";
    // Bumped with every change of the functions' signatures or results: sluice.native refuses a core built from
    // other sources (a stale in-place build) rather than call what is not there.
    m.attr("VERSION") = 7;
    sluice::register_queue(m);
    sluice::register_io(m);
    sluice::register_image(m);
    sluice::register_jpeg(m);
    sluice::register_resize(m);
    sluice::register_audio(m);
    sluice::register_flac(m);
    sluice::register_signal(m);
}
