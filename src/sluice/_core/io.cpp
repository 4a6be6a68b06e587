// Reading a batch's files into one buffer, back to back, with the GIL released.
#include <cerrno>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <vector>

#include "core.h"

namespace sluice {
namespace {

std::vector<std::string> paths_of(const py::sequence& paths) {
    std::vector<std::string> out;
    out.reserve(py::len(paths));
    for (auto p : paths) out.push_back(p.cast<std::string>());
    return out;
}

// File sizes (st_size), or -errno where a file cannot be stat'ed.
py::array_t<int64_t> file_sizes(const py::sequence& paths_in) {
    std::vector<std::string> paths = paths_of(paths_in);
    py::array_t<int64_t> sizes(static_cast<py::ssize_t>(paths.size()));
    int64_t* s = sizes.mutable_data();
    {
        py::gil_scoped_release release;
        for (size_t i = 0; i < paths.size(); ++i) {
            struct stat st;
            s[i] = ::stat(paths[i].c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -errno;
        }
    }
    return sizes;
}

// Reads file i into out[offsets[i] : offsets[i] + sizes[i]] until that slot is full or the file ends. Returns
// (bytes read per file, status per file): status 0 read, 1 the file holds more than its slot (it grew since its
// size was taken; one spare byte shows it without another system call), -errno it could not be read.
py::tuple read_files(const py::sequence& paths_in, py::array_t<int64_t, py::array::c_style> offsets,
                     py::array_t<int64_t, py::array::c_style> sizes, py::buffer out_buf) {
    std::vector<std::string> paths = paths_of(paths_in);
    const size_t n = paths.size();
    if (static_cast<size_t>(offsets.size()) != n || static_cast<size_t>(sizes.size()) != n)
        throw std::invalid_argument("read_files: offsets and sizes need one value per path");
    Bytes out = bytes_of(out_buf, true);
    const int64_t* off = offsets.data();
    const int64_t* sz = sizes.data();
    for (size_t i = 0; i < n; ++i)
        if (off[i] < 0 || sz[i] < 0 || static_cast<uint64_t>(off[i] + sz[i]) > out.size)
            throw std::invalid_argument("read_files: a file's slot lies outside the buffer");
    py::array_t<int64_t> got(static_cast<py::ssize_t>(n));
    py::array_t<int32_t> status(static_cast<py::ssize_t>(n));
    int64_t* g = got.mutable_data();
    int32_t* st = status.mutable_data();
    {
        py::gil_scoped_release release;
        char spare;
        for (size_t i = 0; i < n; ++i) {
            g[i] = 0;
            st[i] = 0;
            int fd = ::open(paths[i].c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                st[i] = -errno;
                continue;
            }
            uint8_t* dst = out.data + off[i];
            int64_t size = sz[i], have = 0;
            for (;;) {
                struct iovec iov[2] = {{dst + have, static_cast<size_t>(size - have)}, {&spare, 1}};
                ssize_t r = ::readv(fd, iov, 2);
                if (r < 0) {
                    if (errno == EINTR) continue;
                    st[i] = -errno;
                    break;
                }
                if (have + r > size) {  // more bytes than the slot holds: the file grew
                    have = size;
                    st[i] = 1;
                    break;
                }
                have += r;
                if (r == 0 || have == size) break;
            }
            g[i] = have;
            ::close(fd);
        }
    }
    return py::make_tuple(got, status);
}

}  // namespace

void register_io(py::module_& m) {
    m.def("file_sizes", &file_sizes, py::arg("paths"), "Sizes of files in bytes (-errno where stat fails).");
    m.def("read_files", &read_files, py::arg("paths"), py::arg("offsets"), py::arg("sizes"), py::arg("out"),
          "Read files into slots of one buffer: (bytes read, status: 0 ok, 1 grew, -errno) per file.");
}

}  // namespace sluice
