// sluice._core: the per-sample host work of a batch (reading files, parsing headers, drawing crop windows,
// decoding and converting), done in C++ with the GIL released, one call per batch or per chunk of a batch.
// Links neither CUDA nor torch; the codec libraries it uses (libjpeg, libsndfile) are opened at run time from the
// wheels Python already loaded. Every function has a pure-Python twin in sluice.native giving identical results.
#include "core.h"

PYBIND11_MODULE(_core, m) {
    m.doc() = "sluice's compiled core (see sluice.native)";
    // Bumped with every change of the functions' signatures or results: sluice.native refuses a core built from
    // other sources (a stale in-place build) rather than call what is not there.
    m.attr("VERSION") = 9;
    sluice::register_pool(m);
    sluice::register_io(m);
    sluice::register_image(m);
    sluice::register_detection(m);
    sluice::register_jpeg(m);
    sluice::register_resize(m);
    sluice::register_audio(m);
    sluice::register_flac(m);
    sluice::register_signal(m);
}
