// Reading a batch's files, or byte ranges of them, into one buffer, back to back, with the GIL released; CRC-32C.
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <fcntl.h>
#include <mutex>
#include <stdexcept>
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

// Reads the file at ``path`` into dst[0 : size] until the slot is full or the file ends: the bytes read, and the
// status: 0 read, 1 the file holds more than its slot (it grew since its size was taken; one spare byte shows it
// without another system call), -errno it could not be read. Needs no GIL.
void read_one(const std::string& path, uint8_t* dst, int64_t size, int64_t& got, int32_t& status) {
    got = 0;
    status = 0;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        status = -errno;
        return;
    }
    char spare;
    int64_t have = 0;
    for (;;) {
        struct iovec iov[2] = {{dst + have, static_cast<size_t>(size - have)}, {&spare, 1}};
        ssize_t r = ::readv(fd, iov, 2);
        if (r < 0) {
            if (errno == EINTR) continue;
            status = -errno;
            break;
        }
        if (have + r > size) {  // more bytes than the slot holds: the file grew
            have = size;
            status = 1;
            break;
        }
        have += r;
        if (r == 0 || have == size) break;
    }
    got = have;
    ::close(fd);
}

void check_slots(const char* what, const int64_t* off, const int64_t* sz, size_t n, size_t capacity) {
    for (size_t i = 0; i < n; ++i)
        if (off[i] < 0 || sz[i] < 0 || static_cast<uint64_t>(off[i] + sz[i]) > capacity)
            throw std::invalid_argument(std::string(what) + ": a file's slot lies outside the buffer");
}

// Reads ``size`` bytes of the open file ``fd`` from byte ``from`` into dst: the bytes read (fewer where the file ends
// first) and the status (0, or -errno where a read fails). Needs no GIL.
void read_range(int fd, int64_t from, uint8_t* dst, int64_t size, int64_t& got, int32_t& status) {
    int64_t have = 0;
    status = 0;
    while (have < size) {
        ssize_t r = ::pread(fd, dst + have, static_cast<size_t>(size - have), from + have);
        if (r < 0) {
            if (errno == EINTR) continue;
            status = -errno;
            break;
        }
        if (r == 0) break;  // the file ends first
        have += r;
    }
    got = have;
}

// A batch of items (files, byte ranges) read into slots of one buffer by several threads at once. Every thread that
// calls work() takes the next unread item until none is left, so that a thread that starts late (its core busy, the
// GIL taken) takes fewer items instead of holding the batch back as a fixed run of items would; wait() returns once
// every item taken has been read. A thread that calls work() after that finds nothing and returns. Subclasses read
// item i (read_item, without the GIL) and may release what they hold once all are read (all_read).
class SharedBatchRead {
public:
    virtual ~SharedBatchRead() = default;

    // Reads items until none is left; returns how many this call read.
    size_t work() {
        py::gil_scoped_release release;
        size_t mine = 0;
        for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) {
            read_item(i, g_[i], st_[i]);
            ++mine;
            std::lock_guard<std::mutex> lock(m_);
            if (++finished_ == n_) {
                all_read();
                done_.notify_all();
            }
        }
        return mine;
    }

    // Blocks until every item has been read (call work() first, or make sure other threads do).
    void wait() {
        py::gil_scoped_release release;
        std::unique_lock<std::mutex> lock(m_);
        done_.wait(lock, [this] { return finished_ == n_; });
    }

    py::tuple results() const { return py::make_tuple(got_, status_); }

protected:
    SharedBatchRead(size_t n, const py::buffer& out_buf, const int64_t* offsets, const int64_t* sizes,
                    const char* what)
        : n_(n), keep_(out_buf) {
        Bytes out = bytes_of(out_buf, true);
        data_ = out.data;
        check_slots(what, offsets, sizes, n, out.size);
        off_.assign(offsets, offsets + n);
        sz_.assign(sizes, sizes + n);
        got_ = py::array_t<int64_t>(static_cast<py::ssize_t>(n));
        status_ = py::array_t<int32_t>(static_cast<py::ssize_t>(n));
        g_ = got_.mutable_data();
        st_ = status_.mutable_data();
    }

    // Reads item i into data_[off_[i] : off_[i] + sz_[i]]: the bytes read and the status. Needs no GIL.
    virtual void read_item(size_t i, int64_t& got, int32_t& status) = 0;
    // Called once, by the thread that read the last item, when no thread reads any more.
    virtual void all_read() {}

    size_t n_;
    uint8_t* data_ = nullptr;
    std::vector<int64_t> off_, sz_;

private:
    py::object keep_;  // the buffer's owner, alive while a late thread may still call work()
    py::array_t<int64_t> got_;
    py::array_t<int32_t> status_;
    int64_t* g_ = nullptr;
    int32_t* st_ = nullptr;
    std::atomic<size_t> next_{0};
    size_t finished_ = 0;
    std::mutex m_;
    std::condition_variable done_;
};

// One batch of files read by several threads at once: file i into out[offsets[i] : offsets[i] + sizes[i]]
// (read_one); results: (bytes read, status: 0 ok, 1 grew, -errno) per file.
class FileBatchRead : public SharedBatchRead {
public:
    FileBatchRead(const py::sequence& paths_in, py::array_t<int64_t, py::array::c_style> offsets,
                  py::array_t<int64_t, py::array::c_style> sizes, py::buffer out_buf)
        : SharedBatchRead(checked_count("FileBatchRead", py::len(paths_in), offsets, sizes), out_buf,
                          offsets.data(), sizes.data(), "FileBatchRead"),
          paths_(paths_of(paths_in)) {}

private:
    void read_item(size_t i, int64_t& got, int32_t& status) override {
        read_one(paths_[i], data_ + off_[i], sz_[i], got, status);
    }
    static size_t checked_count(const char* what, size_t n, const py::array_t<int64_t, py::array::c_style>& a,
                                const py::array_t<int64_t, py::array::c_style>& b) {
        if (static_cast<size_t>(a.size()) != n || static_cast<size_t>(b.size()) != n)
            throw std::invalid_argument(std::string(what) + ": offsets and sizes need one value per path");
        return n;
    }

    std::vector<std::string> paths_;
};

// One batch of byte ranges read by several threads at once (read_ranges' slots and results): range i is sizes[i]
// bytes of files[file_index[i]] from byte starts[i] (tar members of a few shards). Each file is opened once, by the
// first thread that needs it, and read by every thread with pread; the files are closed once all ranges are read.
class RangeBatchRead : public SharedBatchRead {
public:
    RangeBatchRead(const py::sequence& files_in, py::array_t<int64_t, py::array::c_style> file_index,
                   py::array_t<int64_t, py::array::c_style> starts, py::array_t<int64_t, py::array::c_style> sizes,
                   py::array_t<int64_t, py::array::c_style> offsets, py::buffer out_buf)
        : SharedBatchRead(checked_count(file_index, starts, sizes, offsets), out_buf, offsets.data(), sizes.data(),
                          "RangeBatchRead"),
          files_(paths_of(files_in)), file_(file_index.data(), file_index.data() + n_),
          from_(starts.data(), starts.data() + n_), fd_(files_.size(), -1), errno_(files_.size(), 0),
          opened_(files_.size(), 0) {
        for (size_t i = 0; i < n_; ++i) {
            if (file_[i] < 0 || static_cast<size_t>(file_[i]) >= files_.size())
                throw std::invalid_argument("RangeBatchRead: a file_index is not an index of files");
            if (from_[i] < 0) throw std::invalid_argument("RangeBatchRead: a range starts before its file");
        }
    }
    ~RangeBatchRead() override { close_all(); }

private:
    void read_item(size_t i, int64_t& got, int32_t& status) override {
        const size_t f = static_cast<size_t>(file_[i]);
        int fd, err;
        {
            std::lock_guard<std::mutex> lock(open_m_);
            if (!opened_[f]) {
                fd_[f] = ::open(files_[f].c_str(), O_RDONLY | O_CLOEXEC);
                errno_[f] = fd_[f] < 0 ? errno : 0;
                opened_[f] = 1;
            }
            fd = fd_[f];
            err = errno_[f];
        }
        if (fd < 0) {
            got = 0;
            status = -err;
            return;
        }
        read_range(fd, from_[i], data_ + off_[i], sz_[i], got, status);
    }
    void all_read() override { close_all(); }
    void close_all() {
        std::lock_guard<std::mutex> lock(open_m_);
        for (int& fd : fd_)
            if (fd >= 0) {
                ::close(fd);
                fd = -1;
            }
    }
    static size_t checked_count(const py::array_t<int64_t, py::array::c_style>& file_index,
                                const py::array_t<int64_t, py::array::c_style>& starts,
                                const py::array_t<int64_t, py::array::c_style>& sizes,
                                const py::array_t<int64_t, py::array::c_style>& offsets) {
        const auto n = file_index.size();
        if (starts.size() != n || sizes.size() != n || offsets.size() != n)
            throw std::invalid_argument("RangeBatchRead: starts, sizes and offsets need one value per file_index");
        return static_cast<size_t>(n);
    }

    std::vector<std::string> files_;
    std::vector<int64_t> file_, from_;
    std::vector<int> fd_, errno_;
    std::vector<char> opened_;
    std::mutex open_m_;
};

// Reads byte ranges of files into slots of one buffer: range i is sizes[i] bytes of paths[i] from byte starts[i],
// into out[offsets[i] : offsets[i] + sizes[i]] (tar members, TFRecord records, the rows of a .npy region).
// Consecutive ranges of one file share one open. Returns (bytes read per range: fewer where the file ends first,
// status per range: 0 read, -errno it could not be read).
py::tuple read_ranges(const py::sequence& paths_in, py::array_t<int64_t, py::array::c_style> starts,
                      py::array_t<int64_t, py::array::c_style> sizes,
                      py::array_t<int64_t, py::array::c_style> offsets, py::buffer out_buf) {
    std::vector<std::string> paths = paths_of(paths_in);
    const size_t n = paths.size();
    if (static_cast<size_t>(starts.size()) != n || static_cast<size_t>(sizes.size()) != n ||
        static_cast<size_t>(offsets.size()) != n)
        throw std::invalid_argument("read_ranges: starts, sizes and offsets need one value per path");
    Bytes out = bytes_of(out_buf, true);
    const int64_t* from = starts.data();
    const int64_t* sz = sizes.data();
    const int64_t* off = offsets.data();
    for (size_t i = 0; i < n; ++i)
        if (from[i] < 0 || off[i] < 0 || sz[i] < 0 || static_cast<uint64_t>(off[i] + sz[i]) > out.size)
            throw std::invalid_argument("read_ranges: a range's slot lies outside the buffer");
    py::array_t<int64_t> got(static_cast<py::ssize_t>(n));
    py::array_t<int32_t> status(static_cast<py::ssize_t>(n));
    int64_t* g = got.mutable_data();
    int32_t* st = status.mutable_data();
    {
        py::gil_scoped_release release;
        int fd = -1, open_errno = 0;
        const std::string* open_path = nullptr;
        for (size_t i = 0; i < n; ++i) {
            g[i] = 0;
            st[i] = 0;
            if (open_path == nullptr || *open_path != paths[i]) {
                if (fd >= 0) ::close(fd);
                fd = ::open(paths[i].c_str(), O_RDONLY | O_CLOEXEC);
                open_errno = fd < 0 ? errno : 0;
                open_path = &paths[i];
            }
            if (fd < 0) {
                st[i] = -open_errno;
                continue;
            }
            read_range(fd, from[i], out.data + off[i], sz[i], g[i], st[i]);
        }
        if (fd >= 0) ::close(fd);
    }
    return py::make_tuple(got, status);
}

// CRC-32C (Castagnoli), as TFRecord and many storage formats check their data: slicing by 8 over a table made once.
uint32_t crc32c_table[8][256];
bool crc32c_ready = [] {
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (int t = 1; t < 8; ++t)
            crc32c_table[t][i] = (crc32c_table[t - 1][i] >> 8) ^ crc32c_table[0][crc32c_table[t - 1][i] & 0xFF];
    return true;
}();

uint32_t crc32c_of(const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = (static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                       static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24) ^ c;
        c = crc32c_table[7][lo & 0xFF] ^ crc32c_table[6][(lo >> 8) & 0xFF] ^ crc32c_table[5][(lo >> 16) & 0xFF] ^
            crc32c_table[4][lo >> 24] ^ crc32c_table[3][p[4]] ^ crc32c_table[2][p[5]] ^ crc32c_table[1][p[6]] ^
            crc32c_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

// The CRC-32C of each slice buf[offsets[i] : offsets[i] + sizes[i]], with the GIL released.
py::array_t<uint32_t> crc32c(py::buffer buf_in, py::array_t<int64_t, py::array::c_style> offsets,
                             py::array_t<int64_t, py::array::c_style> sizes) {
    Bytes buf = bytes_of(buf_in, false);
    const size_t n = static_cast<size_t>(offsets.size());
    if (static_cast<size_t>(sizes.size()) != n) throw std::invalid_argument("crc32c: one size per offset");
    const int64_t* off = offsets.data();
    const int64_t* sz = sizes.data();
    for (size_t i = 0; i < n; ++i)
        if (off[i] < 0 || sz[i] < 0 || static_cast<uint64_t>(off[i] + sz[i]) > buf.size)
            throw std::invalid_argument("crc32c: a slice lies outside the buffer");
    py::array_t<uint32_t> out(static_cast<py::ssize_t>(n));
    uint32_t* o = out.mutable_data();
    {
        py::gil_scoped_release release;
        for (size_t i = 0; i < n; ++i) o[i] = crc32c_of(buf.data + off[i], static_cast<size_t>(sz[i]));
    }
    return out;
}

}  // namespace

void register_io(py::module_& m) {
    m.def("file_sizes", &file_sizes, py::arg("paths"), "Sizes of files in bytes (-errno where stat fails).");
    py::class_<FileBatchRead>(m, "FileBatchRead",
                              "Files read into slots of one buffer by every thread that calls work(); wait() "
                              "returns once all are read; results(): (bytes read, status: 0 ok, 1 grew, -errno) "
                              "per file.")
        .def(py::init<const py::sequence&, py::array_t<int64_t, py::array::c_style>,
                      py::array_t<int64_t, py::array::c_style>, py::buffer>(),
             py::arg("paths"), py::arg("offsets"), py::arg("sizes"), py::arg("out"))
        .def("work", &FileBatchRead::work, "Read files until none is left; how many this call read.")
        .def("wait", &FileBatchRead::wait, "Block until every file has been read.")
        .def("results", &FileBatchRead::results, "(bytes read, status) per file.");
    py::class_<RangeBatchRead>(m, "RangeBatchRead",
                               "Byte ranges of files (range i: sizes[i] bytes of files[file_index[i]] from "
                               "starts[i]) read into slots of one buffer by every thread that calls work(); wait() "
                               "returns once all are read; results(): (bytes read, status) per range, as "
                               "read_ranges.")
        .def(py::init<const py::sequence&, py::array_t<int64_t, py::array::c_style>,
                      py::array_t<int64_t, py::array::c_style>, py::array_t<int64_t, py::array::c_style>,
                      py::array_t<int64_t, py::array::c_style>, py::buffer>(),
             py::arg("files"), py::arg("file_index"), py::arg("starts"), py::arg("sizes"), py::arg("offsets"),
             py::arg("out"))
        .def("work", &RangeBatchRead::work, "Read ranges until none is left; how many this call read.")
        .def("wait", &RangeBatchRead::wait, "Block until every range has been read.")
        .def("results", &RangeBatchRead::results, "(bytes read, status) per range.");
    m.def("read_ranges", &read_ranges, py::arg("paths"), py::arg("starts"), py::arg("sizes"), py::arg("offsets"),
          py::arg("out"), "Read byte ranges of files into slots of one buffer: (bytes read, status: 0 ok, -errno).");
    m.def("crc32c", &crc32c, py::arg("buf"), py::arg("offsets"), py::arg("sizes"),
          "CRC-32C (Castagnoli) of each slice of a buffer.");
}

}  // namespace sluice
